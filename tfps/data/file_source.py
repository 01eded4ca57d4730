"""What the file-backed sources share: their files, the eval cut and the check of its first good
row, and the MovieLens split in words."""
import contextlib
import os

import tensorflow as tf

from tfps.data.lines import TruncatedFileError, read_lines
from tfps.data.schema import graph_code, numpy_batches
from tfps.errors import ReaderError, error_line, nothing_to_train

DATA_DOCS = "docs/data-and-models.md"   # the page that says where to get each source's data


class DataMissing(ValueError):
    """A data path that holds no data: it does not exist, a glob matches no file, a directory lacks
    the files its format needs. Attributes: what (the config key or command that names it, e.g.
    "data.path"), path, and docs (the page that says where to get the data)."""

    def __init__(self, what, path, problem="does not exist"):
        self.what, self.path, self.docs = what, path, DATA_DOCS
        super().__init__(f"{what} {path!r} {problem}: {DATA_DOCS} says where to get the data")


def absent(what, path):
    """The DataMissing of a path that names no file: it does not exist, or a glob matches none."""
    return DataMissing(what, path, "matches no file" if any(c in path for c in "*?[") else "does not exist")


def files(path, what):
    """Sorted files of a directory (not hidden), a glob, or one file; DataMissing naming path if none."""
    if tf.io.gfile.isdir(path):
        found = [os.path.join(path, f) for f in sorted(tf.io.gfile.listdir(path)) if not f.startswith(".")]
        found = [f for f in found if not tf.io.gfile.isdir(f)]
        if not found:
            raise DataMissing(what, path, "is a directory without files")
        return found
    found = sorted(tf.io.gfile.glob(path))
    if not found:
        raise absent(what, path)
    return found


class EvalSetEmpty(ValueError):
    """An eval set without a good row, found before training. Attributes: path (the eval data as
    the config names it: data.eval_path, or the MovieLens directory whose split it is), reason
    (why, in words), bad_rows (malformed rows read and skipped on the way: data.skip_bad_rows)."""

    def __init__(self, path, reason, bad_rows=0):
        self.path, self.reason, self.bad_rows = path, reason, bad_rows
        super().__init__(f"the eval set is empty: no examples in {path!r} ({reason}): nothing to evaluate the "
                         f"model on")


def readers_error(e, what):
    """The ValueError of a TF error raised reading data: the reader's own (tfps.errors.ReaderError:
    file, line, what is wrong; or its "nothing to train on"), else `what` (the data it read) and
    TF's telling line."""
    found = ReaderError.find(e)
    if found is not None:
        return found
    empty = nothing_to_train(e)   # names its file
    return ValueError(empty if empty else f"{what}: {error_line(e)}")


def first_good_batch(make_dataset, what):
    """Reads the (features, labels) batches of make_dataset() in a graph and session of their own
    up to the first that holds a row, no further: (True, malformed rows skipped before it), or
    (False, malformed rows skipped) when the data ends first. A read that fails (a malformed row
    without data.skip_bad_rows, a damaged file) is readers_error(e, what)."""
    skipped = 0
    try:
        with contextlib.closing(numpy_batches(make_dataset)) as batches:
            for features, labels in batches:
                skipped += int(features.get("bad_rows", 0))
                if len(labels):
                    return True, skipped
    except tf.errors.OpError as e:
        raise readers_error(e, what) from None
    return False, skipped


def has_text(path, skip_bad_rows):
    """Whether a (plain or gzip) text file has a line that is not empty, reading no more than it
    must. A gzip file that ends before one is TruncatedFileError (a ValueError naming the file),
    or with skip_bad_rows a file without text."""
    try:
        return any(line.strip() for line in read_lines(path))
    except TruncatedFileError:
        if skip_bad_rows:
            return False
        raise


class FileSource:
    def __init__(self, cfg):
        self.cfg = cfg

    @graph_code
    def _limited(self, ds):
        """The first eval.examples examples of the eval batches (all when it is null)."""
        n = self.cfg.eval.examples
        if n is None:
            return ds

        def step(seen, batch):
            features, labels = batch
            keep = tf.minimum(tf.maximum(n - seen, 0), tf.size(labels, out_type=tf.int64))
            cut = {k: (v if k == "bad_rows" else v[:keep]) for k, v in features.items()}
            return seen + keep, (seen, cut, labels[:keep])
        limited = ds.scan(tf.constant(0, tf.int64), step).take_while(lambda seen, f, l: seen < n)
        return limited.map(lambda seen, f, l: (f, l))

    def oracle_auc(self, batch_size):
        return None

    def check_eval_rows(self):
        """EvalSetEmpty (or the reader's error, a ValueError naming the file and line) unless the eval
        set has a good row, read up to that row and no further: in batches of one row, or of
        eval.batch_size rows when data.skip_bad_rows skips the bad ones (a file of them is read
        whole). A bad row after the first good one is the evaluation's to meet."""
        d = self.cfg.data
        batch = self.cfg.eval.batch_size if d.skip_bad_rows else 1
        found, skipped = first_good_batch(self.eval_input_fn(batch), self.eval_location())
        if not found:
            raise EvalSetEmpty(self.eval_location(), f"every one of its {skipped} rows is malformed and skipped: "
                                                     f"data.skip_bad_rows" if skipped else "it holds no row", skipped)

    def eval_location(self):
        """The eval data as the config names it."""
        return self.cfg.data.eval_path or self.cfg.data.path


def split_of(d):
    """How a MovieLens config splits each user's ratings by time, in words."""
    if d.validation:
        return (f"validation: each user's last {d.eval_fraction:.0%} by time left out as the test share, "
                f"the last {d.eval_fraction:.0%} of the rest for eval")
    return f"each user's last {d.eval_fraction:.0%} by time for eval"
