"""Checkpointing of tables: one SaveableObject per EmbeddingVariable, picked up by
tf.compat.v1.train.Saver.

A variable NAME is saved under its own name only, whatever its shard count or placement:
NAME-keys [N], -values [N, dim], -slots [N, k*dim], -freq [N], -last_step [N], -slot_init [k]
(the rows of every shard, concatenated) and -admission [S] (the admission sketch, summed over
shards; S = 0 without admission). A restore re-shards the rows by floormod(key, num_shards),
so a checkpoint of N shards restores into M shards, through any Saver (the Estimator's, a
re-created session's, `tfps export`'s). Before any table changes, one check per restore reads
the checkpoint's index and refuses it unless every table of the graph is there whole, with its
dim (a restore is exact for every table or changes none), and each variable checks its parts.
"""
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

from tfps.ops.checkpoint import check_tables

PARTS = ("keys", "values", "slots", "freq", "last_step", "slot_init", "admission")
DTYPES = {"keys": tf.int64, "values": tf.float32, "slots": tf.float32, "freq": tf.int64,
          "last_step": tf.int64, "slot_init": tf.float32, "admission": tf.int32}


class TableSaveable(saveable_object.SaveableObject):
    """Saves an EmbeddingVariable through EmbeddingVariable.export and restores it through
    EmbeddingVariable.load. The export ops are built when a Saver first asks for them."""

    def __init__(self, ev):
        self._ev = ev
        self._exported = None
        device = ev.handles[0].device
        specs = [saveable_object.SaveSpec(self._part(p), "", f"{ev.name}-{p}", dtype=DTYPES[p], device=device)
                 for p in PARTS]
        # The object's own name is not what the checkpoint uses (that is the specs' names); a
        # MetaGraph export lists it in SAVEABLE_OBJECTS, and an import resolves it to an op.
        super().__init__(ev.handles[0], specs, ev.handles[0].op.name)

    def _part(self, part):
        def tensor():
            if self._exported is None:
                with tf.compat.v1.name_scope(f"{self._ev.name}/export/"):
                    self._exported = self._ev.export()
            return self._exported[part]
        return tensor

    def restore(self, restored_tensors, restored_shapes):
        del restored_shapes
        check = _check_every_table(restored_tensors[0], self._ev.model_graph)
        with tf.control_dependencies([check] if check is not None else []):
            return self._ev.load(dict(zip(PARTS, restored_tensors)))


def _check_every_table(restored, model_graph):
    """One TfpsCheckTables per Saver restore (per checkpoint prefix tensor), over every table of
    the model graph (a tfps.embedding.ModelGraph, which keeps the check): each table's import
    waits for it, so a checkpoint that cannot restore one table exactly restores none. None when
    `restored` does not come from a RestoreV2 (no prefix)."""
    if restored.op.type != "RestoreV2":
        return None
    prefix = restored.op.inputs[0]
    graph = restored.graph
    checks = model_graph.restore_checks
    if prefix.name not in checks:
        tables = list(model_graph.tables.values())
        with graph.colocate_with(prefix.op), tf.control_dependencies(None):
            checks[prefix.name] = check_tables(prefix, [ev.name for ev in tables], [ev.dim for ev in tables],
                                               name="tfps_check_tables")
    return checks[prefix.name]
