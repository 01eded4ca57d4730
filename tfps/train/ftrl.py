"""FTRL-proximal: dense variables exactly as tf.compat.v1.train.FtrlOptimizer; tables in place,
accumulator and linear term living in the row."""
import tensorflow as tf

from tfps.ops import training as training_ops
from tfps.train.optimizer import TableOptimizerMixin


class FtrlOptimizer(TableOptimizerMixin, tf.compat.v1.train.FtrlOptimizer):
    """Same arguments as tf.compat.v1.train.FtrlOptimizer, beta included (folded into the L2
    strength as TF does: l2 + beta / (2 lr)). Tables support l2_shrinkage_regularization_strength
    == 0 (the ApplyFtrl update)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        shrinkage = self._argument("l2_shrinkage_regularization_strength")
        if shrinkage != 0.0:
            raise ValueError("tfps FtrlOptimizer: l2_shrinkage_regularization_strength is not supported on "
                             f"tables, got {shrinkage}")

    def _apply_table(self, shard, keys, grads, lr, step):
        beta = self._argument("beta")
        beta = 0.0 if beta is None else beta   # as TF takes it
        return training_ops.table_apply_ftrl(
            shard.handle, keys, grads, lr, step,
            tf.constant(self._argument("l1_regularization_strength"), tf.float32),
            # TF folds beta into L2 the same way (ftrl.py, _prepare).
            tf.cast(self._argument("l2_regularization_strength") + beta / (2.0 * tf.maximum(lr, 1e-36)), tf.float32),
            tf.constant(self._argument("learning_rate_power"), tf.float32),
            initial_accumulator_value=float(self._argument("initial_accumulator_value")))
