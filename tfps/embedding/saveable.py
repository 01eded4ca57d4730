"""Checkpointing of tables: one SaveableObject per EmbeddingVariable, picked up by
tf.compat.v1.train.Saver.

A variable NAME of k shards is saved as k parts, each written by its own shard on its own
device (one SaveableObject per shard: a sharded Saver runs one save per device, all at once, so
no process holds more than its own shard's rows):
- NAME-part{i}-keys [n_i], -values [n_i, dim], -slots [n_i, s*dim], -freq [n_i], -last_step
  [n_i], -admission [S]: shard i's rows (the keys with floormod(key, k) == i) and its admission
  sketch (S = 0 without admission);
- NAME-parts: k; NAME-slot_init [s]: the optimizer slots' initial value;
- empty stand-ins NAME-part{p}-* for k <= p < MAX_PARTS, so that a graph of up to MAX_PARTS
  shards finds every name its Saver reads.
The names are the model's (a table's name and its parts), never a device's. A restore builds
each shard of the graph, on its own device, from the parts that can hold its keys, read in
slices (TfpsTableRestoreStage; kernels/checkpoint_parts.h), so a checkpoint of k shards restores
into any number of shards and no process reads more than the rows it keeps plus a slice. A
checkpoint of the layout before parts (NAME-keys, NAME-values, ...) restores as one part.

Before any table changes, one check per restore reads the checkpoint's index and refuses it
unless every table of the graph is there whole, with its dim; each table's shards then stage
their rows (reading checks every checksum) and put them in only once every shard of the table
has staged, so a restore is exact for a table or leaves it as it was. It goes through any Saver
(the Estimator's, a re-created session's, `tfps export`'s): the Saver's own RestoreV2 of a
table's names is never run, only its prefix is used.
"""
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

from tfps.ops import embedding_table as table_ops
from tfps.ops.checkpoint import check_tables

COLUMNS = ("keys", "values", "slots", "freq", "last_step", "admission")   # of each part
DTYPES = {"keys": tf.int64, "values": tf.float32, "slots": tf.float32, "freq": tf.int64,
          "last_step": tf.int64, "slot_init": tf.float32, "admission": tf.int32, "parts": tf.int64}
MAX_PARTS = 64   # part names every checkpoint holds (empty beyond its shard count): the most shards it restores into


def _own_group(device):
    """The device string of a shard's specs: the shard's device, spelled out in full (replica 0,
    CPU:0 where it names none). A sharded Saver saves and restores per device string, so the
    tables' parts form groups of their own, apart from the dense variables on the same task: the
    Saver's read of a table group's names (a bulk RestoreV2) then has no consumer and never runs,
    and a restore reads a table only through its shards' stages, in slices."""
    spec = tf.DeviceSpec.from_string(device or "")
    spec = spec.replace(replica=0 if spec.replica is None and spec.job is not None else spec.replica,
                        device_type=spec.device_type or "CPU",
                        device_index=0 if spec.device_index is None else spec.device_index)
    return spec.to_string()


def part_name(table, part, column):
    """The checkpoint name of column `column` of part `part` of table `table`."""
    return f"{table}-part{part}-{column}"


def standins(part, parts):
    """The parts whose empty stand-ins part `part` of `parts` saves: p > part with p == part mod
    parts, up to MAX_PARTS (so the parts of every graph of up to MAX_PARTS shards are named)."""
    return range(part + parts, MAX_PARTS, parts)


def empty_shape(column, dim):
    """The shape of column `column`'s empty stand-in, for values of width `dim`."""
    return [0, dim] if column in ("values", "slots") else [0]


def saveables(ev):
    """The SaveableObjects of table `ev`: one per shard, on the shard's device (a sharded Saver
    saves each device's on that device), the first also holding the part count and slot_init."""
    if ev.num_shards > MAX_PARTS:
        raise ValueError(f"table {ev.name!r}: {ev.num_shards} shards, at most {MAX_PARTS} are supported")
    return [PartSaveable(ev, i) for i in range(ev.num_shards)]


class PartSaveable(saveable_object.SaveableObject):
    """Shard i of an EmbeddingVariable, saved as part i on the shard's device: its rows, and empty
    stand-ins for the parts p > i with p == i mod k up to MAX_PARTS, so that a graph of any shard
    count up to MAX_PARTS finds every name it restores where a Saver reads them (a Saver built
    with sharded=False reads every name in one RestoreV2, whole). The rows come from
    TfpsTableRestoreStage, reading in slices only the parts that hold its keys."""

    def __init__(self, ev, i):
        self._ev, self._i = ev, i
        self._exported = None
        h = ev.handles[i]
        device = _own_group(h.device)
        specs = [saveable_object.SaveSpec(self._column(c), "", part_name(ev.name, i, c), dtype=DTYPES[c],
                                          device=device) for c in COLUMNS]
        for p in standins(i, ev.num_shards):
            specs += [saveable_object.SaveSpec(self._empty(c), "", part_name(ev.name, p, c), dtype=DTYPES[c],
                                               device=device) for c in COLUMNS]
        if i == 0:
            specs.append(saveable_object.SaveSpec(self._parts, "", f"{ev.name}-parts", dtype=tf.int64,
                                                  device=device))
            specs.append(saveable_object.SaveSpec(self._column("slot_init"), "", f"{ev.name}-slot_init",
                                                  dtype=tf.float32, device=device))
        # The object's own name is not what the checkpoint uses (that is the specs' names); a
        # MetaGraph export lists it in SAVEABLE_OBJECTS, and an import resolves it to an op.
        super().__init__(h, specs, h.op.name)

    def _export(self):
        if self._exported is None:
            h = self._ev.handles[self._i]
            with tf.compat.v1.get_default_graph().colocate_with(h.op), \
                    tf.compat.v1.name_scope(f"{self._ev.name}/export/part{self._i}/"):
                rows = table_ops.table_export(h)
                self._exported = dict(zip(("keys", "values", "slots", "freq", "last_step", "slot_init"), rows),
                                      admission=table_ops.table_export_admission(h))
        return self._exported

    def _column(self, column):
        return lambda: self._export()[column]

    def _empty(self, column):
        def tensor():
            shape = empty_shape(column, self._ev.dim)
            with tf.compat.v1.get_default_graph().colocate_with(self._ev.handles[self._i].op):
                return tf.zeros(shape, DTYPES[column], name=f"{self._ev.name}/empty_{column}")
        return tensor

    def _parts(self):
        with tf.compat.v1.get_default_graph().colocate_with(self._ev.handles[0].op):
            return tf.constant(self._ev.num_shards, tf.int64, name=f"{self._ev.name}/parts")

    def restore(self, restored_tensors, restored_shapes):
        del restored_shapes
        first = restored_tensors[0]
        if first.op.type != "RestoreV2":
            raise ValueError(f"table {self._ev.name!r} restores from a checkpoint's prefix (a Saver's RestoreV2), "
                             f"not from tensors")
        return _restore(self._ev, self._i, first)


def _restore(ev, i, restored):
    """A Saver's restore of `ev`, built at its first shard's restore (one per prefix tensor): every
    shard's stage, after the check of every table, then every shard's commit, each waiting for
    every stage. The later shards' restores add nothing: a Saver that holds any shard of a table
    restores all of it."""
    del i
    prefix = restored.op.inputs[0]
    graph = restored.graph
    done = ev.model_graph.restore_stages
    key = (ev.name, prefix.name)
    if key in done:
        return tf.no_op()
    with graph.as_default():
        commits = restore_shards(ev, prefix, after=[_check_every_table(restored, ev.model_graph)])
    done[key] = commits
    return tf.group(*commits)


def restore_shards(ev, prefix, table_name=None, after=(), slice_bytes=8 << 20):
    """[op per shard]: the restore of table `ev` from the checkpoint at `prefix` (a string tensor
    or path), from its table `table_name` (default ev.name): every shard's stage (after the ops
    `after`), then every shard's commit, each waiting for every stage, so no shard changes before
    every shard has read its rows (TfpsTableRestoreStage, TfpsTableRestoreCommit)."""
    stages = stage_shards(ev, prefix, table_name, after, slice_bytes)
    return commit_shards(ev, stages, after=stages)


def stage_shards(ev, prefix, table_name=None, after=(), slice_bytes=8 << 20):
    """[staged rows per shard] of table `ev` from table `table_name` (default ev.name) of the
    checkpoint at `prefix`, each read on its shard's device after the ops `after`; nothing changes
    until commit_shards puts them in."""
    graph = tf.compat.v1.get_default_graph()
    stages = []
    for j, h in enumerate(ev.handles):
        with graph.colocate_with(h.op), tf.control_dependencies(list(after)):
            stages.append(table_ops.table_restore_stage(h, prefix, table_name=table_name or ev.name,
                                                        slice_bytes=slice_bytes, name=f"restore_stage_{j}"))
    return stages


def commit_shards(ev, stages, after):
    """[op per shard]: each shard of `ev` replaced by its staged rows (stage_shards), after the ops
    or tensors `after` (every stage of the restore, so no shard changes before all have read)."""
    graph = tf.compat.v1.get_default_graph()
    commits = []
    with tf.control_dependencies(list(after)):
        for j, (h, staged) in enumerate(zip(ev.handles, stages)):
            with graph.colocate_with(h.op):
                commits.append(table_ops.table_restore_commit(h, staged, name=f"restore_commit_{j}"))
    return commits


def _check_every_table(restored, model_graph):
    """One TfpsCheckTables per Saver restore (per checkpoint prefix tensor), over every table of
    the model graph (a tfps.embedding.ModelGraph, which keeps the check): each table's restore
    waits for it, so a checkpoint that cannot restore one table exactly restores none."""
    prefix = restored.op.inputs[0]
    graph = restored.graph
    checks = model_graph.restore_checks
    if prefix.name not in checks:
        tables = list(model_graph.tables.values())
        with graph.colocate_with(prefix.op), tf.control_dependencies(None):
            checks[prefix.name] = check_tables(prefix, [ev.name for ev in tables], [ev.dim for ev in tables],
                                               name="tfps_check_tables")
    return checks[prefix.name]
