"""What the file-backed sources share: their files, the eval cut, and the MovieLens split in words."""
import os

import tensorflow as tf

from tfps.data.lines import TruncatedFileError, read_lines
from tfps.data.schema import graph_code

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


def split_of(d):
    """How a MovieLens config splits each user's ratings by time, in words."""
    if d.validation:
        return (f"validation: each user's last {d.eval_fraction:.0%} by time left out as the test share, "
                f"the last {d.eval_fraction:.0%} of the rest for eval")
    return f"each user's last {d.eval_fraction:.0%} by time for eval"
