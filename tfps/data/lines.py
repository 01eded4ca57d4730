"""Lines of plain and gzip text files, read to their end: a gzip file that ends early is an
error naming it, never read as if it were whole.

A gzip file (.gz) is truncated when its stream ends before its end-of-stream marker (cut
mid-stream, before or inside its trailer) or when its trailer does not match the data (CRC,
length). TF's TextLineDataset reads the first kind as a shorter file without a word, and fails
the second with a DataLossError that does not name the file; so tfps decompresses gzip files
itself (Python's gzip module, zlib underneath), in tf.data through a generator that yields
whole batches of lines: the Criteo reader ran at 140k and 119k rows/s this way against 137k and
111k through TextLineDataset (same run, 2 shared cores).

Lines are split on "\\n" and every "\\r" is dropped (as TextLineDataset does). Empty lines are
yielded like any other: the readers say what they make of them.

    for line in read_lines("day_0.gz"): ...        # TruncatedFileError naming the file
    ds = line_batches("day_0.gz", 1024)            # tf.data: (line numbers [b], lines [b], reasons [b])
"""
import gzip
import logging
import zlib

import tensorflow as tf

READ_BYTES = 1 << 20     # most decompressed bytes read at once
_warned = set()


class TruncatedFileError(ValueError):
    """A gzip file that ends early; the message names the file. path, line (the line number
    where the data ends, from 1) and reason are attributes."""

    def __init__(self, path, line, reason):
        super().__init__(f"{path} line {line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


def _reason(error):
    if isinstance(error, EOFError):
        return f"truncated: the gzip stream ends before its end-of-stream marker ({error})"
    return f"truncated or corrupt: the gzip data does not match its trailer or format ({error})"


def _batches(path, batch_size):
    """Yields (first line number, [lines]) of up to batch_size lines (fewer only at the end); a gzip
    file that ends early ends with (line number, [the partial line, maybe empty], reason)."""
    first, lines, pending = 1, [], b""
    with tf.io.gfile.GFile(path, "rb") as raw:
        # read1: what one read decompressed (read() would drop it when the stream then ends early)
        read = gzip.GzipFile(fileobj=raw, mode="rb").read1 if path.endswith(".gz") else raw.read
        try:
            while True:
                chunk = read(READ_BYTES)
                if not chunk:
                    break
                parts = (pending + chunk).replace(b"\r", b"").split(b"\n")
                pending = parts.pop()
                lines.extend(parts)
                while len(lines) >= batch_size:
                    yield first, lines[:batch_size], None
                    del lines[:batch_size]
                    first += batch_size
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            if lines:
                yield first, lines, None
            yield first + len(lines), [pending], _reason(e)
            return
    if pending:
        lines.append(pending)
    if lines:
        yield first, lines, None


def read_lines(path):
    """Yields the lines (bytes, without "\\n") of a plain or gzip (.gz) text file; a gzip file that
    ends early raises TruncatedFileError after its last whole line."""
    for first, lines, reason in _batches(path, 4096):
        if reason:
            raise TruncatedFileError(path, first, reason)
        yield from lines


def line_batches(path, batch_size):
    """A tf.data.Dataset of one file's lines in batches of batch_size (the last may be smaller):
    (line numbers from 1 int64 [b], lines string [b], reasons string [b]). reasons are empty but
    for a gzip file that ends early: its last element is then the partial line (maybe empty)
    with the reason, one row that a reader counts as bad."""
    path = str(path)
    if not path.endswith(".gz"):
        def number(b, batch):
            n = tf.shape(batch, out_type=tf.int64)[0]
            return b * batch_size + 1 + tf.range(n), batch, tf.fill([n], "")
        return tf.data.TextLineDataset(path).batch(batch_size).enumerate().map(number)

    def blocks():
        for first, lines, reason in _batches(path, batch_size):
            if reason and (path, first) not in _warned:   # once a process: a repeated input reads it again
                _warned.add((path, first))
                logging.getLogger("tfps").warning("%s line %d: %s", path, first, reason)
            yield first, len(lines), b"\n".join(lines), (reason or "").encode()

    def split(first, n, block, reason):
        return first + tf.range(n), tf.strings.split(block, "\n"), tf.fill([n], reason)
    spec = (tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.string),
            tf.TensorSpec([], tf.string))
    return tf.data.Dataset.from_generator(blocks, output_signature=spec).map(split)


__all__ = ["TruncatedFileError", "line_batches", "read_lines"]
