"""The data source a JobConfig names (data.format): its schema, training and eval input_fns.

    source = make_source(cfg)
    source.schema                                   # tfps.data.schema.Schema of its batches
    source.train_input_fn(batch_size, start, shard_index, num_shards)   # endless
    source.eval_input_fn(batch_size)                # the eval set, once
    source.eval_size()                              # examples in the eval set (None: unknown)
    source.check_eval_rows()                        # EvalSetEmpty unless the eval set has a good row
    source.oracle_auc()                             # the best reachable AUC (synthetic data only)

Every source deals a trainer the same share of its stream of batches (tfps.data.schema.share):
batches start + k, start + k + W, ... for trainer k of W.
"""
import functools

import numpy as np
import tensorflow as tf

from tfps.data import criteo, movielens, sequences, tfrecord
from tfps.data.file_source import EvalSetEmpty, FileSource, has_text, readers_error, split_of
from tfps.data.file_source import files as _files
from tfps.data.lines import TruncatedFileError, read_lines
from tfps.data.sequence_source import SequenceSource
from tfps.data.schema import Schema
from tfps.data.synthetic import SyntheticCriteo, auc

EVAL_INDEX_BASE = 1 << 40  # synthetic eval batches never share a seed with training batches
_COUNT_LINES_MAX_BYTES = 4 << 30


def _first(start, shard_index):
    return (lambda: start() + shard_index) if callable(start) else start + shard_index


class SyntheticSource:
    """The Criteo-shaped generator with a planted model (tfps.data.synthetic)."""

    def __init__(self, cfg):
        self.gen, self.examples = SyntheticCriteo(cfg.data), cfg.eval.examples
        self.schema = schema_of(cfg)

    def describe(self):
        return f"synthetic data ({self.gen.config.num_categorical} categorical features)"

    def train_input_fn(self, batch_size, start=0, shard_index=0, num_shards=1):
        return train_input_fn(self.gen, batch_size, _first(start, shard_index), num_shards)

    @functools.lru_cache(None)
    def eval_set(self, batch_size):
        return eval_set(self.gen, self.examples, batch_size)

    def eval_input_fn(self, batch_size):
        """The eval set's batches, fed from this process's arrays: a dataset of constants would put
        them in the graph (26 MB at 100,000 examples), and TensorFlow copies a graph's constants
        each time it optimizes or partitions it."""
        features, labels, _ = self.eval_set(batch_size)

        def batches():
            for i in range(0, len(labels), batch_size):
                yield {k: v[i:i + batch_size] for k, v in features.items()}, labels[i:i + batch_size]
        return lambda: tf.data.Dataset.from_generator(batches, output_signature=_signature(self.gen.config)).prefetch(1)

    def eval_size(self):
        return self.examples

    def oracle_auc(self, batch_size):
        _, labels, prob = self.eval_set(batch_size)
        return auc(labels, prob)

    def check_eval_rows(self):
        """Nothing to check: the generator makes eval.examples rows (at least 1: tfps.config_bounds)."""


def train_input_fn(gen, batch_size, first_batch=0, stride=1):
    """Endless batches first_batch, first_batch + stride, ... of the synthetic generator.

    first_batch: an int, or a function called each time the iterator starts that says where to
    resume."""
    def batches():
        i = first_batch() if callable(first_batch) else first_batch
        while True:
            dense, ids, labels, _ = gen.batch(i, batch_size)
            yield {"dense": dense, "ids": ids}, labels
            i += stride

    def input_fn():
        return tf.data.Dataset.from_generator(batches, output_signature=_signature(gen.config, batch_size)).prefetch(2)
    return input_fn


def _signature(c, rows=None):
    """(features, labels) specs of the synthetic generator's batches of `rows` (None: any)."""
    return ({"dense": tf.TensorSpec([rows, c.num_dense], tf.float32),
             "ids": tf.TensorSpec([rows, c.num_categorical], tf.int64)},
            tf.TensorSpec([rows], tf.float32))


def eval_set(gen, examples, batch_size):
    """(features dict of numpy arrays, labels, true probabilities) of the fixed synthetic eval sample."""
    parts = [gen.batch(EVAL_INDEX_BASE + i, min(batch_size, examples - i * batch_size))
             for i in range((examples + batch_size - 1) // batch_size)]
    dense, ids, labels, prob = (np.concatenate(p) for p in zip(*parts))
    return {"dense": dense, "ids": ids}, labels, prob


class CriteoSource(FileSource):
    """Criteo display-advertising text logs (tfps.data.criteo)."""
    schema = criteo.SCHEMA

    def __init__(self, cfg):
        super().__init__(cfg)
        self.train_files = _files(cfg.data.path, "data.path")
        self.eval_files = _files(cfg.data.eval_path, "data.eval_path")
        for what, files in (("data.path", self.train_files), ("data.eval_path", self.eval_files)):
            if not any(has_text(f, cfg.data.skip_bad_rows) for f in files):
                raise ValueError(f"{what} {getattr(cfg.data, what.split('.')[1])!r}: no rows (its files are "
                                 f"empty or blank)")

    def describe(self):
        return f"criteo text logs ({len(self.train_files)} training files, {len(self.eval_files)} eval files)"

    def train_input_fn(self, batch_size, start=0, shard_index=0, num_shards=1):
        return lambda: criteo.criteo_dataset(self.train_files, batch_size, self.cfg.data.skip_bad_rows, shard_index,
                                             num_shards, repeat=True, start=start)

    def eval_input_fn(self, batch_size):
        return lambda: self._limited(criteo.criteo_dataset(self.eval_files, batch_size, self.cfg.data.skip_bad_rows))

    @functools.lru_cache(None)   # counted once a run (the final eval's progress; the check before training reads less)
    def eval_size(self):
        if sum(tf.io.gfile.stat(f).length for f in self.eval_files) > _COUNT_LINES_MAX_BYTES:
            return self.cfg.eval.examples
        lines = 0
        for path in self.eval_files:   # lines that are not empty (rows, good or bad; criteo's rule)
            try:
                for line in read_lines(path):
                    lines += bool(line)
            except TruncatedFileError:   # the reader fails there, or counts a bad row (no example)
                if not self.cfg.data.skip_bad_rows:
                    raise
        return min(lines, self.cfg.eval.examples or lines)


class MovieLensSource(FileSource):
    """A MovieLens directory, split by time per user (tfps.data.movielens)."""
    schema = movielens.SCHEMA

    def __init__(self, cfg):
        super().__init__(cfg)
        movielens.check_directory(cfg.data.path)

    def describe(self):
        return f"MovieLens ratings in {self.cfg.data.path} ({split_of(self.cfg.data)})"

    def _dataset(self, batch_size, split, **kwargs):
        d = self.cfg.data
        return movielens.movielens_dataset(d.path, batch_size, split, d.eval_fraction, d.skip_bad_rows, seed=d.seed,
                                           validation=d.validation, **kwargs)

    def train_input_fn(self, batch_size, start=0, shard_index=0, num_shards=1):
        return lambda: self._dataset(batch_size, "train", repeat=True, start=start, shard_index=shard_index,
                                     num_shards=num_shards)

    def eval_input_fn(self, batch_size):
        return lambda: self._limited(self._dataset(batch_size, "eval"))

    def check_eval_rows(self):
        """EvalSetEmpty (or the reader's error) when the eval split has no rating: the split is by
        time per user, so every rating is read (counted once a run: eval_size)."""
        try:
            size = self.eval_size()
        except tf.errors.OpError as e:
            raise readers_error(e, self.eval_location()) from None
        if size == 0:
            raise EvalSetEmpty(self.eval_location(), split_of(self.cfg.data))

    @functools.lru_cache(None)   # read once a run (a graph and session of its own, 0.6 s of CPU)
    def eval_size(self):
        d = self.cfg.data
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            labels = movielens.load(d.path, "eval", d.eval_fraction, d.skip_bad_rows, d.validation)["label"]
            n = int(session.run(tf.size(labels)))
        return min(n, self.cfg.eval.examples or n)


class TFRecordSource(FileSource):
    """tf.train.Example files described by data.features (or the tfps_features.yaml of tfps convert)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        d = cfg.data
        self.train_files = tfrecord.files_of(d.path)
        self.specs, self.user, self.eval_path = _tfrecord_spec(cfg)
        if not self.eval_path:
            raise ValueError("data.eval_path must name the TFRecord eval files")
        self.eval_files = tfrecord.files_of(self.eval_path, "data.eval_path")
        self.schema = tfrecord.schema_of(self.specs, self.user)
        for files in (self.train_files, self.eval_files):
            tfrecord.check_first_record(files[0], self.specs, d.label, self.user)

    def describe(self):
        return f"TFRecords ({len(self.train_files)} training files)"

    def _dataset(self, files, batch_size, **kwargs):
        return tfrecord.tfrecord_dataset(files, batch_size, self.specs, self.cfg.data.label, self.user, **kwargs)

    def train_input_fn(self, batch_size, start=0, shard_index=0, num_shards=1):
        return lambda: self._dataset(self.train_files, batch_size, repeat=True, start=start, shard_index=shard_index,
                                     num_shards=num_shards)

    def eval_input_fn(self, batch_size):
        return lambda: self._limited(self._dataset(self.eval_files, batch_size))

    def eval_size(self):
        return None   # unknown without reading every record

    def eval_location(self):
        return self.eval_path   # data.eval_path, or the one in tfps_features.yaml


def _tfrecord_spec(cfg):
    """(feature specs, user feature, eval path) of TFRecord data: data.features and data.eval_path,
    else what tfps convert's spec file says."""
    d = cfg.data
    written = tfrecord.read_spec(d.path) or {}
    specs = d.features or written.get("features")
    if not specs:
        tfrecord.files_of(d.path)   # DataMissing when there is nothing at data.path, spec file or records
        raise ValueError(f"data.features is empty and {d.path!r} has no {tfrecord.SPEC_FILE}: say what the "
                         f"features are ({{name, type: int|float|string|int_list, length}})")
    return specs, (d.user if d.features else written.get("user", d.user)), d.eval_path or written.get("eval_path")


SOURCES = {"synthetic": SyntheticSource, "criteo": CriteoSource, "movielens": MovieLensSource,
           "tfrecord": TFRecordSource, "movielens_sequences": SequenceSource}


def make_source(cfg):
    """The source of cfg.data (ValueError naming what is missing: DataMissing for a data path
    without its data)."""
    return SOURCES[cfg.data.format](cfg)


def example_specs(cfg):
    """The feature specs (tfps.data.tfrecord) of cfg.data's rows as tf.train.Examples: data.features
    (or the spec file tfps convert wrote) for TFRecord data, else those tfps convert writes for its
    schema; None for MTGR's samples (movielens_sequences), which are not one row each."""
    if cfg.data.format == "movielens_sequences":
        return None
    if cfg.data.format == "tfrecord":
        return _tfrecord_spec(cfg)[0]
    return tfrecord.specs_for(schema_of(cfg))


def schema_of(cfg):
    """The Schema of cfg.data without reading its data (a TFRecord spec may come from the
    tfps_features.yaml beside the files)."""
    if cfg.data.format == "synthetic":
        c = cfg.data
        return Schema(num_dense=c.num_dense, id_features=tuple(f"C{f + 1}" for f in range(c.num_categorical)),
                      dense_log1p=True)
    if cfg.data.format == "criteo":
        return criteo.SCHEMA
    if cfg.data.format == "movielens":
        return movielens.SCHEMA
    if cfg.data.format == "movielens_sequences":
        return sequences.SCHEMA
    return tfrecord.schema_of(*_tfrecord_spec(cfg)[:2])
