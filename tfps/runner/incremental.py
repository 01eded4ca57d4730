"""Incremental checkpoints: between full checkpoints, deltas -- resumable cuts of the model's
state (tfps.state.deltas): the rows that changed, the dense state and the global step.

Restore = the latest full checkpoint at step S, then the chain of deltas after it, through
tfps.state.StateSaver (the tfps runners' saver): the model resumes at the step of the newest
delta, its reader with it. Each full checkpoint deletes the deltas that the one before it covers.
Removed keys are logged only while this hook runs.

    inc = tfps.runner.IncrementalCheckpoints(model_dir, every_secs=60)
    estimator.train(input_fn, hooks=[tfps.runner.DeltaRestoreHook(model_dir), inc],
                    saving_listeners=[inc.listener])

(DeltaRestoreHook applies the chain after a session restored with another Saver; after a
StateSaver restore there is nothing left for it to do.)
"""
import glob
import os
import shutil
import time

import tensorflow as tf

from tfps.embedding.variable import embedding_variables
from tfps.ops import embedding_table as table_ops
from tfps.state import deltas, disk, manifest as manifests
from tfps.state.deltas import delta_files  # noqa: F401  (the delta files of a model_dir)


class _FullSaveListener(tf.compat.v1.train.CheckpointSaverListener):
    def __init__(self, owner):
        self._owner = owner

    def after_save(self, session, global_step_value):
        self._owner.full_checkpoint_written(session, global_step_value)


class IncrementalCheckpoints(tf.compat.v1.train.SessionRunHook):
    """Writes a delta every `every_secs` seconds (or `every_steps` steps). Pass it as a training
    hook and its `listener` as a checkpoint saving listener, so that a full checkpoint starts a
    new chain of deltas (and deletes the deltas that the full checkpoint before it covers). A
    session continues the chain from the cut it was restored at."""

    def __init__(self, model_dir, every_secs=None, every_steps=None, printer=print):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("IncrementalCheckpoints: give exactly one of every_secs and every_steps")
        if (every_secs is not None and not every_secs > 0) or (every_steps is not None and not every_steps > 0):
            raise ValueError("IncrementalCheckpoints: every_secs / every_steps must be > 0")
        self._dir, self._secs, self._steps, self._print = model_dir, every_secs, every_steps, printer
        self.deltas_written = 0
        self.listener = _FullSaveListener(self)
        self._full_step = None

    def begin(self):
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        self._since = tf.compat.v1.placeholder(tf.int64, [], name="tfps_delta_since")
        self._base = tf.compat.v1.placeholder(tf.int64, [], name="tfps_delta_base")
        self._prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_prefix")
        graph = tf.compat.v1.get_default_graph()
        tables = embedding_variables()
        self._tables = bool(tables)
        text = manifests.manifest(manifests.describe(graph), "delta", manifests.feature_names(graph))
        self._save, self._complete = deltas.save_op(tables, manifests.dense_variables(graph), text, self._since,
                                                    self._base, self._prefix)
        track = []
        for ev in tables:
            for h in ev.handles:
                with graph.colocate_with(h.op):
                    track.append(table_ops.table_track_removed(h, self._gs))
        self._track = tf.group(*track)

    def after_create_session(self, session, coord):
        # A delta being written when its trainer died stays aside: no reader looks at it. This
        # trainer holds the model_dir's lease, so no other one is writing one now.
        for path in glob.glob(os.path.join(self._dir, ".tmp-delta-*")):   # its files and its parts' _temp dir
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
        session.run(self._track)
        # The next delta continues the newest cut on disk: the one this session was restored at,
        # or the full checkpoint a saver hook wrote at the session's start (on a cluster other
        # trainers may have moved the global step on since; their rows are in the next delta).
        self._start_chain(deltas.latest_cut(self._dir)[2] if disk.latest_checkpoint(self._dir)
                          else int(session.run(self._gs)))

    def _start_chain(self, step):
        # The removed-keys logs are not reset: each delta takes the removals stamped at or
        # after its base step and empties the logs in the same step, so none falls between.
        # _since: rows stamped at or after it go in the next delta; _last_step: the cut it continues.
        self._since_step = self._last_step = step
        self._last_time = time.time()

    def after_run(self, run_context, run_values):
        if not self._tables:
            return
        if self._secs and time.time() - self._last_time < self._secs:
            return   # not due: no read of the global step (a round trip to its PS in a cluster)
        step = run_context.session.run(self._gs)
        due = bool(self._secs) or step - self._last_step >= self._steps
        if due and step > self._last_step:
            self.write_delta(run_context.session, step)

    def write_delta(self, session, step):
        """Writes the delta of the state since the last delta or full checkpoint: into a temporary
        bundle first, renamed into place, so a reader never sees half a delta. Its name is the
        global step its dense state holds (a trainer running beside may have moved it past `step`)."""
        read = step
        tmp = os.path.join(self._dir, f".tmp-delta-{step}")
        _, complete = session.run([self._save, self._complete], {
            self._since: self._since_step, self._base: self._last_step, self._prefix: tmp})
        step = int(tf.train.load_variable(tmp, "global_step"))
        final = os.path.join(self._dir, f"delta-{step}")
        if complete:
            self._print(f"delta-{step}: more keys were removed than the log keeps (kMaxRemovedPerShard); this "
                        f"delta holds every row of the tables that overflowed and replaces them on restore",
                        flush=True)
        for suffix in [p[len(tmp):] for p in glob.glob(tmp + ".*")]:
            if suffix != ".index":
                os.replace(tmp + suffix, final + suffix)
        os.replace(tmp + ".index", final + ".index")   # the index last: it makes the delta visible
        # Rows of steps that read the global step before `read` may land after the export: the
        # next delta takes rows from `read` on (a row in two deltas is harmless).
        self._since_step, self._last_step, self._last_time = read, step, time.time()
        self.deltas_written += 1

    def full_checkpoint_written(self, session, global_step_value):
        # A full checkpoint holds everything up to here: later deltas start from it. The deltas
        # the one before it covers go (those after it stay, so that it remains restorable).
        previous = self._full_step
        self._full_step = global_step_value
        # The chain continues from the global step the checkpoint holds (what a restore resumes
        # at); on a cluster it can be past the one it is named by (read before the save). Rows
        # are taken from the earlier one on.
        saved = deltas.checkpoint_step(os.path.join(self._dir, f"model.ckpt-{global_step_value}")) \
            if tf.io.gfile.exists(os.path.join(self._dir, f"model.ckpt-{global_step_value}.index")) \
            else global_step_value
        self._start_chain(saved)
        self._since_step = min(saved, global_step_value)
        if previous is None:
            return
        for step, prefix in delta_files(self._dir):
            if step <= previous:
                for path in glob.glob(prefix + ".*"):
                    os.remove(path)


class DeltaRestoreHook(tf.compat.v1.train.SessionRunHook):
    """After a session restored the latest full checkpoint with a Saver that does not apply
    deltas, applies the chain of deltas after it (tables, then the dense state and global step of
    the last delta), each checked first as a whole (tfps.state.deltas.delta_chain). After a
    tfps.state.StateSaver restore (the tfps runners') the session is already at the newest cut and
    this hook does nothing."""

    def __init__(self, model_dir, printer=print):
        self._dir, self._print = model_dir, printer
        self.applied = []

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        self._prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_restore_prefix")
        self._variables = embedding_variables()
        self._description = manifests.describe(graph)
        self._apply = deltas.apply_tables_op(self._variables, self._prefix)
        self._dense = deltas.apply_dense_op(manifests.dense_variables(graph), self._prefix)

    def after_create_session(self, session, coord):
        step = int(session.run(self._gs))
        chain = deltas.delta_chain(self._dir, step, self._variables, self._description)
        for delta_step, prefix in chain:
            session.run(self._apply, {self._prefix: prefix})
            self.applied.append(delta_step)
        if chain and self._dense is not None:
            session.run(self._dense, {self._prefix: chain[-1][1]})
        if chain:
            self._print(f"applied {len(chain)} deltas after step {step}: {[s for s, _ in chain]}", flush=True)
