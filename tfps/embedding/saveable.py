"""Checkpointing of tables: one SaveableObject per shard, picked up by tf.compat.v1.train.Saver.

Saved tensors of shard i of variable NAME: NAME/shard_i-keys [N], -values [N, dim],
-slots [N, k*dim], -freq [N], -last_step [N], -slot_init [k].
"""
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

from tfps.ops import embedding_table as table_ops

PARTS = ("keys", "values", "slots", "freq", "last_step", "slot_init")


class TableSaveable(saveable_object.SaveableObject):
    """Saves one table shard through TfpsTableExport and restores it through TfpsTableImport."""

    def __init__(self, handle, name):
        with tf.compat.v1.get_default_graph().colocate_with(handle.op), tf.name_scope(name.replace(":", "_") + "/export"):
            tensors = table_ops.table_export(handle)
        specs = [saveable_object.SaveSpec(t, "", f"{name}-{part}") for t, part in zip(tensors, PARTS)]
        super().__init__(handle, specs, name)
        self._handle = handle

    def restore(self, restored_tensors, restored_shapes):
        del restored_shapes
        with tf.compat.v1.get_default_graph().colocate_with(self._handle.op):
            return table_ops.table_import(self._handle, *restored_tensors)
