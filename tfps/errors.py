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
