"""Deltas: resumable cuts of a model's state between full checkpoints, and the chain they form.

A delta `MODEL_DIR/delta-<step>` (a TF checkpoint bundle, made visible by renaming its index
into place last) is the model's state at <step>, written as a difference to the cut before it:
- per table NAME of k shards, one part per shard, written by the shard on its own device (each
  device saves its parts, and the parts are merged into one bundle, as a sharded Saver does):
  NAME-delta-part{i}-{keys, values, slots, freq, last_step}: the rows of shard i updated since
  the cut before; -removed: its keys removed or evicted since then; -complete: some shard's
  removed-keys log outgrew its bound (config.h), so every part holds every row of its shard and
  the delta replaces the table; -admission: the shard's admission sketch; NAME-delta-parts (k)
  and NAME-delta-slot_init. Each shard of a graph of any shard count applies the parts that can
  hold its keys (TfpsTableApplyDelta; kernels/checkpoint_parts.h);
- every dense variable (optimizer slots and the global step included) under its checkpoint name,
  whole: dense state is small;
- `tfps_delta/base_step`: the step of the cut it continues from; `tfps_manifest` (manifest.py).

The newest cut of a model_dir is the latest full checkpoint at step S and the chain of deltas
after it: the delta whose base is S, the one whose base is that delta's step, and so on. A
restore applies the chain's table rows in order and the dense state of its last delta, so the
model, its global step and (through the step) its reader resume where that delta was cut.
Every delta of the chain is read whole and checked against the model before anything changes;
a delta that does not continue the chain, cannot be read or is another model's refuses the
restore, naming the files to move away.
"""
import glob
import os

import tensorflow as tf

from tfps.embedding import layout
from tfps.embedding.checkpoint_tools import table_problems
from tfps.embedding.saveable import part_name as _part_name
from tfps.state import disk, manifest as manifests

COLUMNS = ("keys", "values", "slots", "freq", "last_step", "removed", "complete", "admission")   # of each part
BASE_STEP = "tfps_delta/base_step"


class DeltaRefused(ValueError):
    """A delta the restore will not apply (unreadable, not continuing the chain, another model's).
    `files`: the prefixes of the deltas to move away to resume from the cut before them."""

    def __init__(self, message, files):
        super().__init__(message)
        self.files = list(files)


def delta_table(table_name):
    """The name a table's rows have in a delta (its parts: tfps.embedding.layout)."""
    return f"{table_name}-delta"




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


def _move_away(model_dir, prefixes):
    files = sorted(os.path.basename(p) + ".*" for p in prefixes)
    return (f"move {' '.join(files)} out of {model_dir} to resume from the cut before "
            f"{os.path.basename(min(prefixes, key=lambda p: int(p.rsplit('-', 1)[1])))}")


def _read(prefix, whole):
    """(manifest dict or None, base step, {delta table name: its shapes}) of a delta; with whole, every tensor is
    read, so that a damaged delta is refused before any applies. ValueError when unreadable."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        if whole:
            for name in shapes:
                reader.get_tensor(name)
        if not reader.has_tensor(BASE_STEP):
            raise ValueError(f"no {BASE_STEP}")
        held = {n[:-len("-parts")]: None for n in shapes if n.endswith("-delta-parts")}
        held.update({n[:-len("-keys")]: None for n in shapes if n.endswith("-delta-keys")})
        held = {n: layout.table_shapes(reader, n) for n in held}
        return manifests.read(prefix, reader), int(reader.get_tensor(BASE_STEP)), held
    except (RuntimeError, ValueError, IndexError, tf.errors.OpError) as e:
        raise ValueError(f"delta {prefix} cannot be read ({str(e).strip().splitlines()[0]})") from None


def delta_chain(model_dir, step, tables=(), description=None, exact=True, checked=None, whole=True):
    """[(step, prefix)]: the chain of deltas that continues the full checkpoint of `step`.

    Raises DeltaRefused (a ValueError; its `files` are the deltas to move away) before anything is
    applied when a delta after `step` cannot be read (whole: every tensor), does not continue
    the one before it, lacks a table of `tables` or has another dim, or its manifest differs from
    `description` (see manifest.difference; exact as there); the message says which files to
    move away. checked: a dict kept between calls (a server polling model_dir): a delta read
    whole once and unchanged since (its files' sizes and times) is not read again."""
    out, previous = [], step
    files = delta_files(model_dir, after_step=step)
    for i, (delta_step, prefix) in enumerate(files):
        later = [p for _, p in files[i:]]
        signature = _file_signature(prefix)
        if checked is not None and checked.get(prefix, (None,))[0] == signature:
            saved, base, shapes = checked[prefix][1]
        else:
            try:
                saved, base, shapes = _read(prefix, whole)
            except ValueError as e:
                raise DeltaRefused(f"{e}; nothing applied: {_move_away(model_dir, later)}", later) from None
            if checked is not None and whole:
                checked[prefix] = (signature, (saved, base, shapes))
        if saved is None:
            raise DeltaRefused(f"delta {prefix} has no {manifests.MANIFEST} (written by a tfps before state "
                               f"manifests): nothing applied; {_move_away(model_dir, later)}", later)
        if base != previous:
            raise DeltaRefused(f"delta {prefix} continues from step {base}, but the cut before it is at step "
                               f"{previous}: it is not part of this model_dir's chain; nothing applied; "
                               f"{_move_away(model_dir, later)}", later)
        problems = table_problems(shapes, tables, lambda ev: delta_table(ev.name), "delta")   # shapes: _read's
        if problems:
            raise DeltaRefused(f"delta {prefix} does not match the model: " + "; ".join(problems) +
                               f"; nothing applied; {_move_away(model_dir, later)}", later)
        if description is not None:
            try:
                manifests.check(saved, description, f"delta {prefix}", exact)
            except manifests.StateMismatch as e:
                raise DeltaRefused(f"{e}; nothing applied; {_move_away(model_dir, later)}", later) from None
        out.append((delta_step, prefix))
        previous = delta_step
    return out


def checkpoint_step(path):
    """The global step saved in checkpoint `path`; ValueError naming the file when unreadable."""
    try:
        reader = tf.train.load_checkpoint(path)
        step = int(reader.get_tensor("global_step"))
    except (RuntimeError, ValueError, IndexError, tf.errors.OpError) as e:
        raise disk.unreadable(path, str(e).strip().splitlines()[0]) from None
    short = disk.short_data(path, reader)
    if short:
        raise disk.unreadable(path, short)
    return step


def latest_cut(model_dir, whole=False):
    """(checkpoint path or None, [(step, prefix)] of its delta chain, step of the newest cut):
    where a restore of model_dir resumes, found by its files (disk.latest_checkpoint: with or
    without the `checkpoint` index). ValueError when the chain is broken (see delta_chain), or
    DeltaRefused when model_dir holds deltas but no full checkpoint. whole: every delta's every
    tensor is read (as a restore reads them), not only its manifest and base step."""
    for _ in range(3):
        path = disk.latest_checkpoint(model_dir)
        if path is None:
            orphans = [prefix for _, prefix in delta_files(model_dir)]
            if orphans:
                raise DeltaRefused(
                    f"{model_dir} holds deltas ({', '.join(os.path.basename(p) for p in orphans[:3])}"
                    f"{', ...' if len(orphans) > 3 else ''}) but no full checkpoint (model.ckpt-*) they continue "
                    f"from: nothing can resume from them, and training from step 0 would write over them; put "
                    f"the model's model.ckpt-* files back, or move the deltas out of {model_dir}", orphans)
            return None, [], 0
        try:
            step = checkpoint_step(path)
        except ValueError:
            if disk.latest_checkpoint(model_dir) != path:
                continue   # rotated away (keep_checkpoint_max) since we listed it
            raise
        chain = delta_chain(model_dir, step, whole=whole)
        return path, chain, chain[-1][0] if chain else step
    return None, [], 0


def resume_summary(path):
    """What a resume of model_dir `path` would do, as `tfps inspect` shows it: {fingerprint,
    checkpoint (its file name), step, deltas: [step, ...]} of its newest cut (the latest whole
    checkpoint and the deltas after it), or of the checkpoint prefix `path` alone; {} when there
    is no checkpoint, or it has no manifest. When a resume would refuse, also `refused` (the
    message train prints) and `refused_files`; the cut is then the newest one still usable
    before them (checkpoint None when there is none)."""
    if not os.path.isdir(path):
        saved = manifests.read(path)
        return {} if saved is None else {"fingerprint": saved["fingerprint"], "checkpoint": os.path.basename(path),
                                         "deltas": [], "step": checkpoint_step(path)}
    refusal = {}
    try:
        checkpoint, chain, step = latest_cut(path, whole=True)   # every delta read whole, as a restore reads it
    except disk.CheckpointUnreadable as e:   # a partial or damaged checkpoint: nothing resumes
        return {"fingerprint": None, "checkpoint": None, "deltas": [], "step": None, "refused": str(e),
                "refused_files": [os.path.basename(p) for p in e.files]}
    except DeltaRefused as e:   # the newest usable cut is the one before the refused deltas
        checkpoint = disk.latest_checkpoint(path)
        refusal = {"refused": str(e), "refused_files": [os.path.basename(p) for p in e.files]}
        if checkpoint is None:
            return {"fingerprint": None, "checkpoint": None, "deltas": [], "step": None, **refusal}
        chain = [(s, p) for s, p in delta_files(path, checkpoint_step(checkpoint)) if p not in e.files]
        step = chain[-1][0] if chain else checkpoint_step(checkpoint)
    if checkpoint is None:
        return {}
    saved = manifests.read(checkpoint)
    if saved is None:
        return {}
    return {"fingerprint": saved["fingerprint"], "checkpoint": os.path.basename(checkpoint),
            "deltas": [s for s, _ in chain], "step": step, **refusal}


def save_op(tables, dense, manifest_text, since, base, prefix):
    """(op that writes a delta of `tables` (EmbeddingVariables) and `dense` ({name: variable})
    to `prefix` (string tensor): the rows updated at or after `since` and the step `base` of the
    cut it continues (int64 tensors); bool tensor: some table's delta is complete). Each table
    shard's part is saved on its own device (into PREFIX_temp/), and the parts are merged into
    the bundle at `prefix`: the rows never leave their PS."""
    from tfps.ops import embedding_table as table_ops
    graph = tf.compat.v1.get_default_graph()
    groups = {}   # device -> (anchor op, names, tensors)
    names, tensors, flags = [manifests.MANIFEST, BASE_STEP], [tf.constant(manifest_text), base], []
    table_tensors = []
    for ev in tables:
        deltas, sketches = [], []
        for h in ev.handles:
            with graph.colocate_with(h.op):
                deltas.append(table_ops.table_export_delta(h, since))
                sketches.append(table_ops.table_export_admission(h))
        with graph.colocate_with(ev.handles[0].op):
            complete = tf.reduce_any(tf.stack([d[7] for d in deltas]))
        flags.append(complete)
        name = delta_table(ev.name)
        for i, (h, d, sketch) in enumerate(zip(ev.handles, deltas, sketches)):
            with graph.colocate_with(h.op):
                def everything(h=h):   # a shard's log overflowed: every row of every shard
                    return list(table_ops.table_export(h)[:5])
                rows = tf.cond(complete, everything, lambda d=d: list(d[:5]))
                part = dict(zip(layout.ROW_COLUMNS, rows), removed=d[6], complete=complete, admission=sketch)
                group = groups.setdefault(h.op.device, (h.op, [], []))
                group[1].extend(_part_name(name, i, c) for c in COLUMNS)
                group[2].extend(tf.identity(part[c]) for c in COLUMNS)
                if i == 0:
                    group[1].extend([f"{name}-parts", f"{name}-slot_init"])
                    group[2].extend([tf.constant(ev.num_shards, tf.int64), d[5]])
                table_tensors.extend(group[2][-len(COLUMNS):])
    # The dense state is read after the tables' rows: with other trainers running, a row holds no
    # update the saved global step does not count.
    slices = [""] * len(names)
    with tf.control_dependencies(table_tensors):
        for _, v in sorted(dense.items()):
            name, spec, _ = manifests.saved_as(v)   # a partitioned variable's part: a slice of the whole
            names.append(name)
            slices.append(spec)
            tensors.append(tf.identity(v.read_value() if hasattr(v, "read_value") else v))
    count = len(groups) + 1
    temp = tf.strings.join([prefix, "_temp/part"])
    saves, parts = [], []
    for index, (anchor, part_names, part_tensors) in enumerate([(None, names, tensors)] + [
            groups[d] for d in sorted(groups)]):
        shard = tf.raw_ops.ShardedFilename(basename=temp, shard=index, num_shards=count)
        parts.append(shard)
        if anchor is None:
            saves.append(tf.raw_ops.SaveV2(prefix=shard, tensor_names=part_names, shape_and_slices=slices,
                                           tensors=part_tensors))
        else:
            with graph.colocate_with(anchor):
                saves.append(tf.raw_ops.SaveV2(prefix=shard, tensor_names=part_names,
                                               shape_and_slices=[""] * len(part_names), tensors=part_tensors))
    with tf.control_dependencies(saves):
        save = tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=tf.stack(parts), destination_prefix=prefix,
                                            delete_old_dirs=True)
    return save, (tf.reduce_any(tf.stack(flags)) if flags else tf.constant(False))


def apply_tables_op(tables, prefix):
    """The op that applies the table rows of the delta at `prefix` (a string tensor), whatever
    shard count wrote it: each shard its removals and rows, or -- for a delta marked complete --
    its rows in place of its contents; and the admission sketch of tables that admit. A stock
    table (tfps.embedding.stock) takes the delta's rows whole."""
    from tfps.embedding.stock import AttachedStockTable
    from tfps.ops import embedding_table as table_ops
    graph = tf.compat.v1.get_default_graph()
    ops = []
    for ev in tables:
        if isinstance(ev, AttachedStockTable):
            name = delta_table(ev.name)
            t = {c: table_ops.read_column(prefix, name, c, dtype) for c, dtype in (
                ("keys", tf.int64), ("values", tf.float32), ("removed", tf.int64))}
            complete = tf.reduce_any(table_ops.read_column(prefix, name, "complete", tf.bool))
            ops.append(tf.cond(complete, lambda ev=ev, t=t: _with_output(ev.load(t)),
                               lambda ev=ev, t=t: _with_output(ev.apply_delta(t))))
            continue
        for h in ev.handles:
            with graph.colocate_with(h.op):
                ops.append(table_ops.table_apply_delta(h, prefix, table_name=ev.name))
    return tf.group(*ops)


def apply_dense_op(dense, prefix):
    """The op that assigns every variable of `dense` (manifest.dense_variables) its value in the
    delta at `prefix` (a string tensor) -- a part of a partitioned variable its slice, whatever
    the partition count that wrote it; None when there is none."""
    graph = tf.compat.v1.get_default_graph()
    ops = []
    for _, v in sorted(dense.items()):
        name, spec, _ = manifests.saved_as(v)
        with graph.colocate_with(v.op if hasattr(v, "op") else v):
            value = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name], shape_and_slices=[spec],
                                         dtypes=[v.dtype.base_dtype])[0]
            ops.append(tf.compat.v1.assign(v, value, validate_shape=True).op)
    return tf.group(*ops) if ops else None


def _with_output(op):
    with tf.control_dependencies([op]):
        return tf.constant(True)
