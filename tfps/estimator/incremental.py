"""Incremental checkpoints: between full checkpoints, small deltas of the rows that changed.

A delta file `MODEL_DIR/delta-<step>` (a TF checkpoint bundle) holds, for every table shard,
the rows updated since the previous delta (or full checkpoint) -- value, slots, freq,
last_step, each row read under its lock -- and the keys removed or evicted since then.
Restore = the latest full checkpoint, then every delta with a larger step, in step order
(DeltaRestoreHook). Dense variables are only in full checkpoints.

    inc = tfps.estimator.IncrementalCheckpoints(model_dir, every_secs=60)
    estimator.train(input_fn, hooks=[inc, tfps.estimator.DeltaRestoreHook(model_dir)],
                    saving_listeners=[inc.listener])
"""
import glob
import os
import time

import tensorflow as tf

from tfps.embedding.variable import embedding_variables
from tfps.ops import embedding_table as table_ops

PARTS = ("keys", "values", "slots", "freq", "last_step", "slot_init", "removed")
DTYPES = (tf.int64, tf.float32, tf.float32, tf.int64, tf.int64, tf.float32, tf.int64)


def _names(ev, shard):
    return [f"{ev.name}/shard_{shard}-delta-{p}" for p in PARTS]


def delta_files(model_dir, after_step=-1):
    """[(step, prefix)] of the deltas in model_dir with step > after_step, in step order."""
    out = []
    for index in glob.glob(os.path.join(model_dir, "delta-*.index")):
        prefix = index[:-len(".index")]
        step = int(prefix.rsplit("-", 1)[1])
        if step > after_step:
            out.append((step, prefix))
    return sorted(out)


class _FullSaveListener(tf.estimator.CheckpointSaverListener):
    def __init__(self, owner):
        self._owner = owner

    def after_save(self, session, global_step_value):
        self._owner.full_checkpoint_written(session, global_step_value)


class IncrementalCheckpoints(tf.compat.v1.train.SessionRunHook):
    """Writes a delta every `every_secs` seconds (or `every_steps` steps). Pass it as a training
    hook, and its `listener` as a checkpoint saving listener, so that a full checkpoint starts
    the deltas afresh."""

    def __init__(self, model_dir, every_secs=None, every_steps=None, printer=print):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("IncrementalCheckpoints: give exactly one of every_secs and every_steps")
        if (every_secs is not None and every_secs <= 0) or (every_steps is not None and every_steps <= 0):
            raise ValueError("IncrementalCheckpoints: every_secs / every_steps must be > 0")
        self._dir, self._secs, self._steps, self._print = model_dir, every_secs, every_steps, printer
        self.deltas_written = 0
        self.listener = _FullSaveListener(self)

    def begin(self):
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        self._since = tf.compat.v1.placeholder(tf.int64, [], name="tfps_delta_since")
        self._prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_prefix")
        names, tensors, resets = [], [], []
        for ev in embedding_variables():
            for i, h in enumerate(ev.handles):
                with tf.compat.v1.get_default_graph().colocate_with(h.op):
                    tensors += list(table_ops.table_export_delta(h, self._since))
                    resets.append(table_ops.table_reset_removed(h))
                names += _names(ev, i)
        self._save = tf.raw_ops.SaveV2(prefix=self._prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                                       tensors=tensors) if names else None
        self._reset = tf.group(*resets)

    def after_create_session(self, session, coord):
        self._last_step = session.run(self._gs)   # the full checkpoint the session started from
        self._last_time = time.time()

    def after_run(self, run_context, run_values):
        if self._save is None:
            return
        step = run_context.session.run(self._gs)
        due = (time.time() - self._last_time >= self._secs) if self._secs else (step - self._last_step >= self._steps)
        if due and step > self._last_step:
            self.write_delta(run_context.session, step)

    def write_delta(self, session, step):
        """Writes the delta of the rows changed since the last delta or full checkpoint."""
        prefix = os.path.join(self._dir, f"delta-{step}")
        session.run(self._save, {self._since: self._last_step, self._prefix: prefix})
        session.run(self._reset)
        self._last_step, self._last_time = step, time.time()
        self.deltas_written += 1

    def full_checkpoint_written(self, session, global_step_value):
        # A full checkpoint holds everything up to here: later deltas start from it.
        session.run(self._reset)
        self._last_step, self._last_time = global_step_value, time.time()


class DeltaRestoreHook(tf.compat.v1.train.SessionRunHook):
    """After the session restored the latest full checkpoint, applies every later delta of
    model_dir in step order."""

    def __init__(self, model_dir, printer=print):
        self._dir, self._print = model_dir, printer
        self.applied = []

    def begin(self):
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        self._prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_restore_prefix")
        ops = []
        for ev in embedding_variables():
            for i, h in enumerate(ev.handles):
                parts = tf.raw_ops.RestoreV2(prefix=self._prefix, tensor_names=_names(ev, i),
                                             shape_and_slices=[""] * len(PARTS), dtypes=list(DTYPES))
                with tf.compat.v1.get_default_graph().colocate_with(h.op):
                    ops.append(table_ops.table_import_delta(h, *parts))
        self._apply = tf.group(*ops)

    def after_create_session(self, session, coord):
        step = session.run(self._gs)
        for delta_step, prefix in delta_files(self._dir, after_step=step):
            session.run(self._apply, {self._prefix: prefix})
            self.applied.append(delta_step)
        if self.applied:
            self._print(f"applied {len(self.applied)} table deltas after step {step}: {self.applied}", flush=True)
