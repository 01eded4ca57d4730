"""StateSaver: the Saver of a model's whole state -- full checkpoints with a manifest, and a
restore of the newest cut (the checkpoint and its delta chain) that checks everything first."""
import os

import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

from tfps.embedding.checkpoint_tools import Saver
from tfps.embedding.variable import embedding_variables
from tfps.errors import error_line
from tfps.ops import embedding_table as table_ops
from tfps.state import deltas, disk, manifest as manifests


class _ManifestSaveable(saveable_object.SaveableObject):
    """The string tensor `tfps_manifest` of a checkpoint; restoring it changes nothing (the
    StateSaver reads and checks it before the restore)."""

    def __init__(self, text):
        tensor = tf.constant(text, name="tfps_manifest")
        super().__init__(tensor, [saveable_object.SaveSpec(tensor, "", manifests.MANIFEST, dtype=tf.string)],
                         manifests.MANIFEST)

    def restore(self, restored_tensors, restored_shapes):
        del restored_tensors, restored_shapes
        return tf.no_op()


def _uninitialized(graph, tables):
    """int32 scalar: how many of the graph's variables and of the tables' shards are not
    initialized (what the scaffold's default ready_op reports, tables being the resources that
    register there)."""
    count = tf.size(tf.compat.v1.report_uninitialized_variables())
    flags = []
    for ev in tables:
        for handle in ev.handles:
            with graph.colocate_with(handle.op):
                flags.append(table_ops.table_is_initialized(handle))
    if not flags:
        return count
    return count + tf.reduce_sum(tf.cast(tf.logical_not(tf.stack(flags)), tf.int32))


TRAINER_SLOTS = 1 << 16   # the trainer ranks rejoin_hook takes (an int64 each, on a PS)


class StateSaver(Saver):
    """A Saver (sharded, relative paths, as tfps's runners use it) whose checkpoints carry the
    model's manifest, and whose restore of a model_dir's latest checkpoint also applies the
    deltas after it (tables, then the dense state and global step of the last one).

    Before anything changes, the checkpoint's manifest is compared with the model (exact: every
    table, variable and the optimizer alike, for training; otherwise the model's tables and
    variables must be saved alike, for evaluation and export) and every delta of the chain is
    read whole and checked the same way: a mismatch is refused with one ValueError
    (manifest.StateMismatch) naming the first difference. `restored_step` is the step of the cut
    the last restore resumed at.

    On a cluster, each trainer's rejoin_hook marks its session on the live
    state from its first step (a clean end, or a restore, clears the marks): a trainer whose
    previous session did not end -- its task was killed, or the session failed -- may have died
    between its step's table updates and its global-step increment, so its new session counts
    that step."""

    def __init__(self, *args, exact=True, write_manifest=True, in_flight=0, printer=print, **kwargs):
        self._exact, self._write_manifest, self._print = exact, write_manifest, printer
        self._in_flight = int(in_flight)
        self._sessions = None
        self._state_ops = None
        self.restored_step = None
        # Training graphs: a variable that is never saved and that only a completed restore (or
        # the init op) initializes, so that the session's ready op -- which other trainers wait
        # on after a PS restart -- says ready only once the whole cut is in. Made here, in the
        # model_fn, so that the scaffold's init and ready ops include it.
        self._ready = None
        if exact:
            self._ready = tf.compat.v1.get_variable(manifests.READY_FLAG, shape=[], dtype=tf.bool, trainable=False,
                                                    initializer=tf.compat.v1.ones_initializer(),
                                                    collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
            # Never saved either: initialized with the model, and cleared by a restore (rejoin_hook).
            # One slot per trainer rank whatever the job's trainer count, so that a job started again
            # with more trainers on PS tasks still alive finds its slots.
            self._sessions = tf.compat.v1.get_variable(manifests.TRAINER_SESSIONS, shape=[TRAINER_SLOTS],
                                                       dtype=tf.int64, trainable=False, use_resource=True,
                                                       initializer=tf.compat.v1.zeros_initializer(),
                                                       collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
        # The op a completed restore runs, made here with the flags (a control dependency on an
        # op marks it: made later, after a session ran the flags' initializers, it would change them).
        self._ready_op = tf.group(self._ready.initializer, self._sessions.initializer,
                                  name="tfps_state_ready_set") if exact else None
        kwargs.setdefault("defer_build", True)
        super().__init__(*args, **kwargs)

    def build(self):
        graph = tf.compat.v1.get_default_graph()
        description = manifests.describe(graph)
        whole = self._var_list is None
        if whole:
            # What a Saver without a var_list saves: the global variables and the SAVEABLE_OBJECTS.
            saveable = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(
                tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS)
            self._var_list = [v for v in saveable if not manifests.internal(v)]
            if self._write_manifest:
                self._var_list.append(_ManifestSaveable(manifests.manifest(description, "full",
                                                                          manifests.feature_names(graph))))
        if whole:   # the saver of the whole model: it restores deltas too
            # Every op a restore may run is made here, before a session can finalize the graph: a
            # delta chain's apply ops (a TfpsTableApplyDelta per table shard, one RestoreV2 for the dense
            # state) and the count of what is not initialized on a cluster.
            gs = tf.compat.v1.train.get_global_step(graph)
            tables = embedding_variables(graph)
            with tf.compat.v1.name_scope("tfps_state_restore/"):
                prefix = tf.compat.v1.placeholder(tf.string, [], name="delta_prefix")
                self._state_ops = dict(
                    description=description, tables=tables, prefix=prefix,
                    in_flight=tf.compat.v1.assign_add(gs, self._in_flight) if gs is not None and self._in_flight else None,
                    ready=self._ready_op,
                    apply_tables=deltas.apply_tables_op(tables, prefix),
                    apply_dense=deltas.apply_dense_op(manifests.dense_variables(graph), prefix),
                    uninitialized=_uninitialized(graph, tables))
        super().build()

    def save(self, sess, save_path, *args, **kwargs):
        if self.saver_def is None:   # built on first use (a graph of the user's own)
            with sess.graph.as_default():
                self.build()
        return super().save(sess, save_path, *args, **kwargs)

    def restore(self, sess, save_path):
        if self.saver_def is None:   # built with defer_build and used directly (Estimator's export)
            with sess.graph.as_default():
                self.build()
        ops = self._state_ops
        if ops is not None and _remote(sess) and not sess.run(ops["uninitialized"]):
            # A trainer of a cluster (the chief restarted) finds the model whole on the PS tasks:
            # that live state is newer than any cut, and the other trainers are training on it.
            self._print("the model on the PS tasks is whole: going on from it, not restoring "
                        f"{os.path.basename(save_path or '')}", flush=True)
            self.restored_step = None
            return None
        step, chain = self.checked_cut(save_path) if ops is not None and save_path is not None and \
            tf.io.gfile.exists(save_path + ".index") else (None, [])
        try:
            out = super().restore(sess, save_path)
        except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.NotFoundError) as e:
            if save_path is None or not tf.io.gfile.exists(save_path + ".index"):
                raise
            raise disk.unreadable(save_path, error_line(e)) from None
        if chain:
            for _, prefix in chain:
                sess.run(ops["apply_tables"], {ops["prefix"]: prefix})
            if ops["apply_dense"] is not None:
                sess.run(ops["apply_dense"], {ops["prefix"]: chain[-1][1]})
            self._print(f"restored the state at step {chain[-1][0]}: checkpoint {os.path.basename(save_path)} and "
                        f"{len(chain)} deltas {[s for s, _ in chain]}", flush=True)
        if ops is not None and ops["in_flight"] is not None and _remote(sess):
            # A cut taken while other trainers ran can hold the table updates of one step per
            # other trainer whose global-step increment had not landed yet: count them, so that
            # no row holds more updates than the global step.
            sess.run(ops["in_flight"])
        if ops is not None and ops["ready"] is not None:
            sess.run(ops["ready"])
        self.restored_step = chain[-1][0] if chain else step
        return out

    def checked_cut(self, save_path):
        """(step, [(step, prefix)] of its delta chain): the cut a restore of checkpoint `save_path`
        puts in -- the chain when it is its model_dir's latest checkpoint -- checked against the
        model first (the manifests, every delta read whole and its tables' shapes); raises as
        restore does."""
        ops = self._state_ops
        try:
            saved = manifests.read(save_path)
        except (tf.errors.OpError, RuntimeError, IndexError) as e:   # (a short file: IndexError)
            raise disk.unreadable(save_path, error_line(e)) from None
        where = f"checkpoint {save_path}"
        if saved is None:
            raise manifests.StateMismatch(
                f"{where} has no {manifests.MANIFEST}: written by a tfps before state manifests, its model "
                f"cannot be checked; train into a new model_dir")
        manifests.check(saved, ops["description"], where, self._exact)
        step = deltas.checkpoint_step(save_path)
        model_dir = os.path.dirname(save_path)
        latest = disk.latest_checkpoint(model_dir)
        chain = []
        if latest is not None and os.path.abspath(latest) == os.path.abspath(save_path):
            chain = deltas.delta_chain(model_dir, step, ops["tables"], ops["description"], self._exact)
        return step, chain

    def restore_dense(self, sess, save_path):
        """Restores only the dense state of the cut of checkpoint `save_path` (its variables, then
        the last delta's), checked as restore checks it, and returns (step, chain) as checked_cut:
        an export, which reads the tables' rows itself (tfps.runner.export_rows)."""
        if self.saver_def is None:
            with sess.graph.as_default():
                self.build()
        ops = self._state_ops
        if ops is None:
            raise ValueError("restore_dense: a StateSaver of the whole model (built without a var_list) only")
        step, chain = self.checked_cut(save_path)
        if ops["apply_dense"] is not None:
            for prefix in [save_path] + [p for _, p in chain[-1:]]:
                try:
                    sess.run(ops["apply_dense"], {ops["prefix"]: prefix})
                except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.NotFoundError) as e:
                    raise disk.unreadable(prefix, error_line(e)) from None
        return step, chain

    def other_saveables(self):
        """What this Saver saves besides the tables, the variables and the manifest (a model_fn's
        own SaveableObjects: a checkpointed lookup table, say): restore_dense leaves them alone."""
        keep = self.dense_saveables()
        return [s for s in keep if not isinstance(s, (_ManifestSaveable, tf.Variable))]

    def dense_saveables(self):
        """What this Saver saves besides the tables (variables, the manifest): a Saver of them
        writes the same names, for an export that writes the tables' rows itself."""
        from tfps.embedding.saveable import PartSaveable
        if self.saver_def is None:
            self.build()
        return [s for s in self._var_list if not isinstance(s, PartSaveable)]

    def rejoin_hook(self, rank, printer=None):
        """The hook of trainer `rank` (0 for the chief, 1, 2, ... for the others; below
        TRAINER_SLOTS) of a cluster: at each session it creates, when this trainer's previous
        session on the same live state took a step and did not end cleanly (its task was killed,
        or the session failed), it adds one to the global step. On the chief it must run before
        the saver hook's first save.

        A trainer's step lands its table updates on the PS tasks, then its global-step increment;
        one killed in between leaves those rows an update ahead of the global step. A restore
        counts such steps of the other trainers (in_flight) and rolls back the trainer's own; a
        trainer that goes on from the live state -- a restarted worker, or a restarted chief that
        finds the model whole -- counts its own here (at most one step too many when it had
        landed none: a batch counted but not trained, never one trained twice)."""
        if self._sessions is None:
            raise ValueError("StateSaver.rejoin_hook: only a training StateSaver (exact=True) counts sessions")
        if not 0 <= rank < TRAINER_SLOTS:
            raise ValueError(f"StateSaver.rejoin_hook: rank {rank} is not in [0, {TRAINER_SLOTS}): a cluster has at "
                             f"most {TRAINER_SLOTS} trainers")
        return _Rejoin(self._sessions, rank, printer or self._print)


class _Rejoin(tf.compat.v1.train.SessionRunHook):
    """StateSaver.rejoin_hook's hook: this trainer's element of the sessions variable is 1 from
    its session's first step until that session ends cleanly (or a restore clears it)."""

    def __init__(self, sessions, rank, printer):
        self._sessions, self._rank, self._print = sessions, rank, printer
        self._marked = False

    def begin(self):
        gs = tf.compat.v1.train.get_global_step()
        if gs is None:
            raise ValueError("StateSaver.rejoin_hook: the graph has no global step")
        graph = tf.compat.v1.get_default_graph()
        with tf.compat.v1.name_scope("tfps_rejoin"), graph.colocate_with(self._sessions.op):
            self._open = tf.gather(self._sessions.read_value(), self._rank)
            rank = tf.constant([self._rank])
            self._mark = self._sessions.scatter_update(tf.IndexedSlices(tf.constant([1], tf.int64), rank)).op
            self._clear = self._sessions.scatter_update(tf.IndexedSlices(tf.constant([0], tf.int64), rank)).op
        with tf.compat.v1.name_scope("tfps_rejoin"), graph.colocate_with(gs.op):
            self._add = tf.compat.v1.assign_add(gs, 1)

    def after_create_session(self, session, coord):
        del coord
        self._marked = False
        # Only this trainer writes its element: a read, then a write, is not a race.
        if session.run(self._open):
            step = int(session.run(self._add))
            session.run(self._clear)   # counted: a session that dies before its first step adds no more
            self._print(f"trainer {self._rank} goes on from the live model, on which its previous session did not "
                        f"end (it was killed, or failed): that session's last step may have landed part of its "
                        f"table updates without its global-step increment, so the global step counts it: "
                        f"{step - 1} -> {step}", flush=True)

    def before_run(self, run_context):
        if not self._marked:   # before the session's first step lands anything
            run_context.session.run(self._mark)
            self._marked = True

    def end(self, session):   # a clean end only (MonitoredSession calls no hook's end after an error)
        try:
            session.run(self._clear)
        except tf.errors.OpError:
            # The PS tasks went away meanwhile: the restore that follows clears the mark. (Were they
            # back whole, the next session would count one step: a batch counted, not trained.)
            pass


def _remote(sess):
    """Whether the session runs on a cluster (a grpc:// target), not in this process."""
    return bool(getattr(sess, "sess_str", ""))
