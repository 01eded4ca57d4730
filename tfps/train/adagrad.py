"""Adagrad: dense variables exactly as tf.compat.v1.train.AdagradOptimizer; tables in place,
the accumulator living in the row (slot 0)."""
import tensorflow as tf

from tfps.ops import training as training_ops
from tfps.train.optimizer import TableOptimizerMixin


class AdagradOptimizer(TableOptimizerMixin, tf.compat.v1.train.AdagradOptimizer):
    """Same arguments as tf.compat.v1.train.AdagradOptimizer."""

    def _apply_table(self, shard, keys, grads, lr, step):
        return training_ops.table_apply_adagrad(
            shard.handle, keys, grads, lr, step,
            initial_accumulator_value=float(self._argument("initial_accumulator_value")))
