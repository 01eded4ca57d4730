"""Wrappers of the fused sparse-apply ops (kernels/training_kernels.cc).

keys: int64 [N] (unique), grads: float32 [N, dim], lr: float32 scalar, step: int64 scalar.
"""
import tensorflow as tf

from tfps.ops._loader import load

for _op in ("TfpsTableApplyGradientDescent", "TfpsTableApplyAdagrad"):
    tf.no_gradient(_op)


def table_apply_gradient_descent(table, keys, grads, lr, step, name=None):
    """value -= lr * grad per key."""
    return load().tfps_table_apply_gradient_descent(table, keys, grads, lr, step, name=name)


def table_apply_adagrad(table, keys, grads, lr, step, initial_accumulator_value=0.1, name=None):
    """accum += grad^2; value -= lr * grad / sqrt(accum) per key."""
    return load().tfps_table_apply_adagrad(table, keys, grads, lr, step,
                                           initial_accumulator_value=initial_accumulator_value,
                                           name=name)
