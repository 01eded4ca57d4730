"""Wrappers of TfpsCheckTables (kernels/checkpoint_kernels.cc) and TfpsTableRows
(kernels/table_rows_kernel.cc)."""
import collections

import tensorflow as tf

from tfps.ops._loader import load

tf.no_gradient("TfpsCheckTables")
tf.no_gradient("TfpsTableRows")

TableRows = collections.namedtuple("TableRows", "keys values slots freq last_step admission slot_init")


def check_tables(prefix, names, dims, name=None):
    """prefix: string scalar (a checkpoint prefix) -> bool scalar, true when the checkpoint holds
    every table names[i] whole with values of width dims[i]; InvalidArgumentError naming every
    table that does not fit otherwise. Reads the checkpoint's index only."""
    return load().tfps_check_tables(prefix, names=list(names), dims=[int(d) for d in dims], name=name)


def table_rows(checkpoint, deltas, table_name, dim, pad_rows=0, with_state=True, slice_bytes=8 << 20, name=None):
    """TableRows of table `table_name` at the cut of checkpoint `checkpoint` (string scalar) and
    the delta chain `deltas` (string vector, in order): keys [N], values [pad_rows + N, dim]
    (the first pad_rows zero), and, with_state, slots [N, k * dim], freq, last_step [N] and the
    admission sketch (else empty); slot_init [k]. The checkpoint is read in slices of about
    slice_bytes: the outputs and the deltas' rows are all that is held whole."""
    return TableRows(*load().tfps_table_rows(checkpoint, deltas, table_name=table_name, dim=int(dim),
                                             pad_rows=int(pad_rows), with_state=bool(with_state),
                                             slice_bytes=int(slice_bytes), name=name))
