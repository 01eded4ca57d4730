"""Incremental checkpoints: between full checkpoints, small deltas of the rows that changed.

A delta file `MODEL_DIR/delta-<step>` (a TF checkpoint bundle) holds, per table NAME (all its
shards together, so a delta restores into any shard count like a full checkpoint):
NAME-delta-{keys, values, slots, freq, last_step, slot_init} -- the rows updated since the
previous delta (or full checkpoint) -- NAME-delta-removed, the keys removed or evicted since
then, and NAME-delta-complete: the removed-keys log outgrew its bound (config.h), so the delta
holds every row and replaces the table. `tfps_delta/base_step` is the step the delta continues
from; `tfps_delta/chain` and `tfps_delta/chain_started` name the chain of deltas it belongs to
(one per session: a restored session starts a new chain from its full checkpoint, which carries
on every row the deltas it applied).

Restore = the latest full checkpoint at step S, then the newest chain that starts at S, in step
order; each delta must continue from the one before, or the restore is refused (ValueError
naming the file) before any table changes. Deltas of older chains are superseded and skipped;
each full checkpoint deletes the deltas that the one before it
covers. Dense variables are only in full checkpoints.
Removed keys are logged only while this hook runs.

    inc = tfps.estimator.IncrementalCheckpoints(model_dir, every_secs=60)
    estimator.train(input_fn, hooks=[tfps.estimator.DeltaRestoreHook(model_dir), inc],
                    saving_listeners=[inc.listener])
"""
import glob
import os
import secrets
import time

import tensorflow as tf

from tfps.embedding.checkpoint_tools import table_problems
from tfps.embedding.saveable import DTYPES
from tfps.embedding.variable import embedding_variables
from tfps.ops import embedding_table as table_ops

ROW_PARTS = ("keys", "values", "slots", "freq", "last_step", "slot_init")
DELTA_DTYPES = {**DTYPES, "removed": tf.int64, "complete": tf.bool}
BASE_STEP, CHAIN, STARTED = "tfps_delta/base_step", "tfps_delta/chain", "tfps_delta/chain_started"


def _name(ev, part):
    return f"{ev.name}-delta-{part}"


def delta_files(model_dir, after_step=-1):
    """[(step, prefix)] of the deltas in model_dir with step > after_step, in step order."""
    out = []
    for index in glob.glob(os.path.join(model_dir, "delta-*.index")):
        prefix = index[:-len(".index")]
        step = prefix.rsplit("-", 1)[1]
        if step.isdigit() and int(step) > after_step:
            out.append((int(step), prefix))
    return sorted(out)


def _file_signature(prefix):
    """(name, size, mtime) of each file of a bundle: a delta is re-read only when one changes."""
    out = []
    for path in sorted(glob.glob(prefix + ".*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((path, st.st_size, st.st_mtime_ns))
    return tuple(out)


def delta_chain(model_dir, step, variables, checked=None):
    """The deltas to apply on a full checkpoint of `step`: ([(step, prefix)] in order, those of the
    newest chain that starts at `step`; [steps of the deltas of older chains, skipped]). Raises ValueError naming the file when a delta of that
    chain does not continue from the one before (a delta is missing), when deltas after `step`
    start from nowhere, or when one lacks a table of `variables` or has another dim.
    checked: a dict kept between calls (a server polling model_dir): a delta read whole once
    and unchanged since (its files' sizes and times) is not read again."""
    chains = {}
    for delta_step, prefix in delta_files(model_dir, after_step=step):
        signature = _file_signature(prefix)
        if checked is not None and checked.get(prefix, (None,))[0] == signature:
            key, base, shapes = checked[prefix][1:]   # read whole before, and unchanged since
        else:
            try:   # every tensor read once here, so that a damaged delta is refused before any applies
                reader = tf.train.load_checkpoint(prefix)
                for name in reader.get_variable_to_shape_map():
                    reader.get_tensor(name)
            except (RuntimeError, ValueError, IndexError, tf.errors.OpError) as e:
                raise ValueError(f"delta {prefix} cannot be read ({str(e).strip().splitlines()[0]}); refusing to "
                                 f"apply any delta after step {step}") from None
            if not reader.has_tensor(BASE_STEP):
                raise ValueError(f"delta {prefix} has no {BASE_STEP}: not a tfps delta, or written by an older tfps")
            key = (float(reader.get_tensor(STARTED)), reader.get_tensor(CHAIN))
            base, shapes = int(reader.get_tensor(BASE_STEP)), reader.get_variable_to_shape_map()
            if checked is not None:
                checked[prefix] = (signature, key, base, shapes)
        chains.setdefault(key, []).append((delta_step, prefix, base, shapes))
    starting_here = [key for key, deltas in chains.items() if deltas[0][2] == step]
    if not starting_here:
        if chains:
            first = min(d for deltas in chains.values() for d in deltas)
            raise ValueError(f"delta {first[1]} continues from step {first[2]}, but the restore is at step {step}: "
                             f"a delta in between is missing; refusing to apply it and the deltas after it. Remove "
                             f"the deltas after step {step} from {model_dir} to resume from step {step}")
        return [], []
    newest = max(starting_here)
    skipped = sorted(d[0] for key, deltas in chains.items() if key != newest for d in deltas)
    previous, out = step, []
    for delta_step, prefix, base, shapes in chains[newest]:
        if base != previous:
            raise ValueError(f"delta {prefix} continues from step {base}, but the one before it is at step "
                             f"{previous}: a delta in between is missing; refusing to apply any delta after step "
                             f"{step}. Remove the deltas after step {previous} from {model_dir} to resume there")
        problems = table_problems(shapes, variables, _name)
        if problems:
            raise ValueError(f"delta {prefix} does not match the model: " + "; ".join(problems))
        previous = delta_step
        out.append((delta_step, prefix))
    return out, skipped


def chain_of(prefix):
    """(chain started, chain id) of a delta: deltas with the same pair are one chain."""
    reader = tf.train.load_checkpoint(prefix)
    return float(reader.get_tensor(STARTED)), reader.get_tensor(CHAIN)


def apply_delta_op(variables, prefix):
    """The op that applies the delta at `prefix` (a string tensor) to `variables`: removals and
    rows, or -- for a delta marked complete -- every row, replacing the table."""
    graph = tf.compat.v1.get_default_graph()
    ops = []
    for ev in variables:
        parts = ROW_PARTS + ("removed", "complete")
        dtypes = [DELTA_DTYPES[p] for p in parts]
        with graph.colocate_with(ev.handles[0].op):
            t = dict(zip(parts, tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[_name(ev, p) for p in parts],
                                                     shape_and_slices=[""] * len(parts), dtypes=dtypes)))
        ops.append(tf.cond(t["complete"], lambda ev=ev, t=t: _with_output(ev.load(t)),
                           lambda ev=ev, t=t: _with_output(ev.apply_delta(t))))
    return tf.group(*ops)


class _FullSaveListener(tf.estimator.CheckpointSaverListener):
    def __init__(self, owner):
        self._owner = owner

    def after_save(self, session, global_step_value):
        self._owner.full_checkpoint_written(session, global_step_value)


class IncrementalCheckpoints(tf.compat.v1.train.SessionRunHook):
    """Writes a delta every `every_secs` seconds (or `every_steps` steps). Pass it as a training
    hook, after DeltaRestoreHook, and its `listener` as a checkpoint saving listener, so that a
    full checkpoint starts a new chain of deltas (and deletes the deltas that the full checkpoint
    before it covers). A session starts a new chain from its full checkpoint; it carries on the
    rows and removals of the deltas DeltaRestoreHook applied."""

    def __init__(self, model_dir, every_secs=None, every_steps=None, printer=print):
        if (every_secs is None) == (every_steps is None):
            raise ValueError("IncrementalCheckpoints: give exactly one of every_secs and every_steps")
        if (every_secs is not None and every_secs <= 0) or (every_steps is not None and every_steps <= 0):
            raise ValueError("IncrementalCheckpoints: every_secs / every_steps must be > 0")
        self._dir, self._secs, self._steps, self._print = model_dir, every_secs, every_steps, printer
        self.deltas_written = 0
        self.listener = _FullSaveListener(self)
        self._full_step = None

    def begin(self):
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        self._since = tf.compat.v1.placeholder(tf.int64, [], name="tfps_delta_since")
        self._prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_prefix")
        self._chain = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_chain")
        self._started = tf.compat.v1.placeholder(tf.float64, [], name="tfps_delta_chain_started")
        graph = tf.compat.v1.get_default_graph()
        names, tensors, track = [BASE_STEP, CHAIN, STARTED], [self._since, self._chain, self._started], []
        for ev in embedding_variables():
            parts = []
            for h in ev.handles:
                with graph.colocate_with(h.op):
                    parts.append(table_ops.table_export_delta(h, self._since))
                    track.append(table_ops.table_track_removed(h, self._gs))
            with graph.colocate_with(ev.handles[0].op):
                complete = tf.reduce_any(tf.stack([p[7] for p in parts]))
                delta = [tf.concat([p[i] for p in parts], 0) for i in range(5)] + [parts[0][5]]

                def everything(ev=ev):   # a shard's log overflowed: every row of every shard
                    full = ev.export()
                    return [full[p] for p in ROW_PARTS]
                rows = tf.cond(complete, everything, lambda delta=delta: delta)
                removed = tf.concat([p[6] for p in parts], 0)
            names += [_name(ev, p) for p in ROW_PARTS + ("removed", "complete")]
            tensors += list(rows) + [removed, complete]
        self._tables = len(names) > 3
        self._complete = tf.reduce_any(tf.stack([t for n, t in zip(names, tensors) if n.endswith("-complete")])) \
            if self._tables else None
        with tf.control_dependencies(tensors):
            self._save = tf.raw_ops.SaveV2(prefix=self._prefix, tensor_names=names,
                                           shape_and_slices=[""] * len(names), tensors=tensors)
        self._track = tf.group(*track)

    def after_create_session(self, session, coord):
        session.run(self._track)
        self._start_chain(session, session.run(self._gs))   # the checkpoint the session started from

    def _start_chain(self, session, step):
        # The removed-keys logs are not reset: each delta takes the removals stamped at or
        # after its base step and empties the logs in the same step, so none falls between.
        self._chain_id, self._chain_started = secrets.token_hex(8), time.time()
        self._last_step, self._last_time = step, time.time()

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
        """Writes the delta of the rows changed since the last delta or full checkpoint: into a
        temporary bundle first, renamed into place, so a reader never sees half a delta."""
        final = os.path.join(self._dir, f"delta-{step}")
        tmp = os.path.join(self._dir, f".tmp-delta-{step}")
        _, complete = session.run([self._save, self._complete], {
            self._since: self._last_step, self._prefix: tmp, self._chain: self._chain_id,
            self._started: self._chain_started})
        if complete:
            self._print(f"delta-{step}: more keys were removed than the log keeps (kMaxRemovedPerShard); this "
                        f"delta holds every row of the tables that overflowed and replaces them on restore",
                        flush=True)
        for suffix in [p[len(tmp):] for p in glob.glob(tmp + ".*")]:
            if suffix != ".index":
                os.replace(tmp + suffix, final + suffix)
        os.replace(tmp + ".index", final + ".index")   # the index last: it makes the delta visible
        self._last_step, self._last_time = step, time.time()
        self.deltas_written += 1

    def full_checkpoint_written(self, session, global_step_value):
        # A full checkpoint holds everything up to here: later deltas start from it. The deltas
        # the one before it covers go (those after it stay, so that it remains restorable).
        previous = self._full_step
        self._full_step = global_step_value
        self._start_chain(session, global_step_value)
        if previous is None:
            return
        for step, prefix in delta_files(self._dir):
            if step <= previous:
                for path in glob.glob(prefix + ".*"):
                    os.remove(path)


class DeltaRestoreHook(tf.compat.v1.train.SessionRunHook):
    """After the session restored the latest full checkpoint, applies every later delta of
    model_dir in step order (checked first as a whole: see delta_chain)."""

    def __init__(self, model_dir, printer=print):
        self._dir, self._print = model_dir, printer
        self.applied = []

    def begin(self):
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        self._prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_delta_restore_prefix")
        self._variables = embedding_variables()
        self._apply = apply_delta_op(self._variables, self._prefix)
        self._track = tf.group(*[table_ops.table_track_removed(h, self._gs) for ev in self._variables
                                 for h in ev.handles])

    def after_create_session(self, session, coord):
        step = session.run(self._gs)
        chain, skipped = delta_chain(self._dir, step, self._variables)
        if skipped:
            self._print(f"skipping deltas of older runs after step {step}, superseded by a newer chain: "
                        f"{skipped}", flush=True)
        if chain:
            # Log the removals the deltas make, so that a new chain of deltas carries them on.
            session.run(self._track)
        for delta_step, prefix in chain:
            session.run(self._apply, {self._prefix: prefix})
            self.applied.append(delta_step)
        if self.applied:
            self._print(f"applied {len(self.applied)} table deltas after step {step}: {self.applied}", flush=True)


def _with_output(op):
    with tf.control_dependencies([op]):
        return tf.constant(True)

