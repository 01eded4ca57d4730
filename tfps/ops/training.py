"""Wrappers of the fused sparse-apply ops (kernels/training_kernels.cc).

keys: int64 [N] (unique), grads: float32 [N, dim], lr: float32 scalar, step: int64 scalar.
"""
import tensorflow as tf

from tfps.ops._loader import load

for _op in ("TfpsTableApplyGradientDescent", "TfpsTableApplyAdagrad", "TfpsTableApplyAdam", "TfpsTableApplyFtrl"):
    tf.no_gradient(_op)


def table_apply_gradient_descent(table, keys, grads, lr, step, name=None):
    """value -= lr * grad per key."""
    return load().tfps_table_apply_gradient_descent(table, keys, grads, lr, step, name=name)


def table_apply_adagrad(table, keys, grads, lr, step, initial_accumulator_value=0.1, name=None):
    """accum += grad^2; value -= lr * grad / sqrt(accum) per key."""
    return load().tfps_table_apply_adagrad(table, keys, grads, lr, step,
                                           initial_accumulator_value=initial_accumulator_value,
                                           name=name)


def table_apply_adam(table, keys, grads, lr, step, beta1, beta2, epsilon, name=None):
    """Lazy Adam with per-row bias correction (see ops/training_ops.cc)."""
    return load().tfps_table_apply_adam(table, keys, grads, lr, step, beta1, beta2, epsilon, name=name)


def table_apply_ftrl(table, keys, grads, lr, step, l1, l2, lr_power, initial_accumulator_value=0.1, name=None):
    """FTRL-proximal as tf.compat.v1.train.FtrlOptimizer, per row."""
    return load().tfps_table_apply_ftrl(table, keys, grads, lr, step, l1, l2, lr_power,
                                        initial_accumulator_value=initial_accumulator_value, name=name)
