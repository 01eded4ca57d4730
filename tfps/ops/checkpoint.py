"""Wrapper of TfpsCheckTables (kernels/checkpoint_kernels.cc)."""
import tensorflow as tf

from tfps.ops._loader import load

tf.no_gradient("TfpsCheckTables")


def check_tables(prefix, names, dims, name=None):
    """prefix: string scalar (a checkpoint prefix) -> bool scalar, true when the checkpoint holds
    every table names[i] whole with values of width dims[i]; InvalidArgumentError naming every
    table that does not fit otherwise. Reads the checkpoint's index only."""
    return load().tfps_check_tables(prefix, names=list(names), dims=[int(d) for d in dims], name=name)
