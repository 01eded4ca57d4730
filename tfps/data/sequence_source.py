"""MTGR's source: MovieLens as user-level samples (tfps.data.sequences), from the CSVs or from
the TFRecords `tfps convert --from movielens_sequences` writes."""
import functools
import os

import numpy as np
import tensorflow as tf

from tfps.data import movielens, sequences
from tfps.data.balance import balance_by_tokens
from tfps.data.file_source import EvalSetEmpty, FileSource, split_of
from tfps.data.schema import graph_code, share


SHUFFLE_SAMPLES = 100_000   # the training shuffle buffer of user samples read from TFRecords


class SequenceSource(FileSource):
    """MovieLens as user-level samples for MTGR (tfps.data.sequences): one sample per user and
    window of candidates; batches of train.batch_size samples, or of at most data.max_tokens
    tokens (tfps.data.balance_by_tokens)."""
    schema = sequences.SCHEMA

    def __init__(self, cfg):
        super().__init__(cfg)
        d = cfg.data
        # TFRecords written by `tfps convert --from movielens_sequences`, or MovieLens CSVs
        self.written = sequences.read_sequence_spec(d.path)
        if self.written is None:
            movielens.check_directory(d.path)
            return
        if d.validation:
            raise ValueError(f"data.validation needs the MovieLens CSVs; {d.path} holds converted samples, cut for "
                             f"test-set evaluation: point data.path at the MovieLens directory")
        asked = {"window": d.window, "history_len": d.history_len, "realtime_len": d.realtime_len,
                 "eval_fraction": d.eval_fraction}
        differ = {k: (v, self.written.get(k)) for k, v in asked.items() if self.written.get(k) != v}
        if differ:
            raise ValueError(f"{d.path} holds samples cut with " + ", ".join(
                f"{k}={w!r}" for k, (_, w) in differ.items()) + "; the config asks for " + ", ".join(
                f"data.{k}={v!r}" for k, (v, _) in differ.items()) + ": set those, or convert again")

    def describe(self):
        d = self.cfg.data
        where = "TFRecords of user samples" if self.written else "MovieLens user samples"
        return f"{where} in {d.path} (windows of {d.window} candidates; {split_of(d)})"

    def samples(self, split, limit=None):
        """The split's samples as numpy dicts (the first `limit` of them)."""
        if self.written is None:
            return self._csv_samples(split)[:limit]
        return sequences.read_samples(lambda: sequences.tfrecord_samples(os.path.join(self.cfg.data.path, split)),
                                      limit)

    @functools.lru_cache(None)
    def _csv_samples(self, split):
        d = self.cfg.data
        return sequences.movielens_user_samples(d.path, split, d.window, d.history_len, d.realtime_len,
                                                d.eval_fraction, d.validation)

    def _samples_dataset(self, split):
        if self.written is None:
            return sequences.sample_dataset(self.samples(split)), len(self.samples(split))
        return (sequences.tfrecord_samples(os.path.join(self.cfg.data.path, split)),
                self.written["splits"][split]["samples"])

    def _check_budget(self, split):
        """ValueError when a sample in memory is longer than data.max_tokens (before training,
        not as an assertion in the input pipeline; converted samples are checked as read)."""
        budget = self.cfg.data.max_tokens
        if not budget or self.written is not None:
            return
        longest = max((sequences.token_count(s) for s in self.samples(split)), default=0)
        if longest > budget:
            raise ValueError(f"data.max_tokens ({budget}) is below the longest {split} sample ({longest} tokens: the "
                             f"profile's 3, history, real-time and candidates); set it to at least {longest}")

    @graph_code
    def _batched(self, ds, batch_size):
        if self.cfg.data.max_tokens:
            ds = balance_by_tokens(ds, self.cfg.data.max_tokens, sequences.tokens)
        else:
            ds = ds.padded_batch(batch_size)
        return ds.map(lambda x: (x, x["label"]))

    def train_input_fn(self, batch_size, start=0, shard_index=0, num_shards=1):
        seed = self.cfg.data.seed
        if self.written is None:
            self.samples("train")   # read (and checked) once, before the graph is built
        self._check_budget("train")

        @graph_code
        def input_fn():
            ds, count = self._samples_dataset("train")
            # in memory: every sample; from TFRecords: a buffer of up to SHUFFLE_SAMPLES
            buffer = count if self.written is None else min(count, SHUFFLE_SAMPLES)
            ds = ds.shuffle(max(buffer, 1), seed=seed, reshuffle_each_iteration=True)
            return share(self._batched(ds.repeat(), batch_size), start, shard_index, num_shards)
        return input_fn

    def eval_input_fn(self, batch_size):
        if self.written is None:
            self.samples("eval")
        self._check_budget("eval")
        return lambda: self._batched(self._first_samples(self._samples_dataset("eval")[0]), batch_size)

    @graph_code
    def _first_samples(self, ds):
        """The eval samples up to the one whose candidates reach eval.examples (all when null):
        whole samples, so the last may carry a few candidates more."""
        n = self.cfg.eval.examples
        if n is None:
            return ds
        counted = ds.scan(tf.constant(0, tf.int64),
                          lambda seen, s: (seen + tf.size(s["label"], out_type=tf.int64), (seen, s)))
        return counted.take_while(lambda seen, s: seen < n).map(lambda seen, s: s)

    def check_eval_rows(self):
        """EvalSetEmpty (or the reader's ValueError) when the eval split has no candidate: MovieLens
        CSVs are read whole (the split is by time per user; the samples made are kept for the
        evaluation), converted samples say their count."""
        if self.eval_size() == 0:
            raise EvalSetEmpty(self.cfg.data.path, split_of(self.cfg.data))

    def eval_size(self):
        """The candidates evaluated (None when unknown before reading: converted samples, cut)."""
        n = self.cfg.eval.examples
        if self.written is not None:
            total = self.written["splits"]["eval"]["candidates"]
            return total if n is None or n >= total else None
        sizes = np.cumsum([len(s["label"]) for s in self.samples("eval")])
        taken = sizes if n is None else sizes[:int(np.searchsorted(sizes, n, side="left")) + 1]
        return int(taken[-1]) if len(taken) else 0
