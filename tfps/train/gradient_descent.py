"""SGD: dense variables exactly as tf.compat.v1.train.GradientDescentOptimizer; tables in place."""
import tensorflow as tf

from tfps.ops import training as training_ops
from tfps.train.optimizer import TableOptimizerMixin


class GradientDescentOptimizer(TableOptimizerMixin, tf.compat.v1.train.GradientDescentOptimizer):
    """Same arguments as tf.compat.v1.train.GradientDescentOptimizer."""

    def _apply_table(self, shard, keys, grads, lr, step):
        return training_ops.table_apply_gradient_descent(shard.handle, keys, grads, lr, step)
