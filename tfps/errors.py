"""The telling line of an exception (TF's errors carry a graph trace): for every layer that
reports one, training and serving alike. No TensorFlow import."""
import re


def error_line(e):
    """The line of an exception that says what went wrong: for TF's errors, the one after the
    graph's trace (not 'Graph execution error:')."""
    message = (getattr(e, "message", None) or str(e)).strip()
    lines = [line.strip() for line in message.splitlines() if line.strip().strip("=")
             and not re.fullmatch(r"([A-Z_]+: )?From /job:\S*:", line.strip())]
    if not lines:
        return type(e).__name__
    nodes = [i for i, line in enumerate(lines) if line.startswith("Node:")]
    if nodes and nodes[-1] + 1 < len(lines):
        return lines[nodes[-1] + 1]
    rest = [line for line in lines if line != "Graph execution error:" and not line.startswith("[[")]
    return rest[0] if rest else lines[0]


# The readers whose malformed-row errors (tfps.ops.data.check_rows) a command shows as they are.
READERS = ("criteo", "movielens", "tfrecord")
_READER_ERROR = re.compile(r"\b(" + "|".join(READERS) + r"): (.+?) line (\d+): (.*)$")
# A reader's input with nothing to train on (tfps.data.schema.fail_without_rows, movielens.load).
_NOTHING_TO_TRAIN = re.compile(r"assertion failed: \[((?:" + "|".join(READERS) + r"): nothing to train on .*)\]")


def nothing_to_train(e):
    """A reader's "nothing to train on" line in an exception's message (out of TF's assertion and
    iterator chain), or None."""
    found = _NOTHING_TO_TRAIN.search(getattr(e, "message", None) or str(e))
    return found.group(1) if found else None


def _split_hint(text):
    """(what, hint) of "WHAT (HINT)": the hint is the last balanced parenthesized group; "" without."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            if i > 0 and text[i] == "(" and text[i - 1] == " " and text.endswith(")"):
                return text[:i - 1], text[i + 1:-1]
            return text, ""
    return text, ""


class ReaderError(ValueError):
    """A reader's own error about its input, as the reader raised it (tfps.ops.data.check_rows:
    "READER: FILE line N: WHAT (HINT)"), out of whatever wraps it (TF's iterator chain of the
    dataset function it ran in). Attributes: reader, file, line, what, hint (what to do, or "")."""

    def __init__(self, reader, file, line, what, hint=""):
        self.reader, self.file, self.line, self.what, self.hint = reader, file, int(line), what, hint
        super().__init__(f"{reader}: {file} line {self.line}: {what}" + (f" ({hint})" if hint else ""))

    @classmethod
    def find(cls, e):
        """The ReaderError in an exception's message (a TF error from an input function), or None."""
        message = getattr(e, "message", None) or str(e)
        for line in message.splitlines():
            found = _READER_ERROR.search(line.strip())
            if found:
                reader, file, number, rest = found.groups()
                return cls(reader, file, number, *_split_hint(rest))
        return None
