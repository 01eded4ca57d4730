"""Wrappers of the TfpsTable* ops (kernels/lookup_kernels.cc, maintenance_kernels.cc, checkpoint_kernels.cc).

Shapes: keys int64 [N]; values float32 [N, dim]; slots float32 [N, k*dim].
"""
import tensorflow as tf

from tfps.ops._loader import load

_INITIALIZERS = ("zeros", "constant", "uniform", "normal", "truncated_normal")

for _op in ("TfpsTableHandle", "TfpsTableFind", "TfpsTableLookupUnique", "TfpsTableAssign", "TfpsScatterAddRows",
            "TfpsTableRemove", "TfpsTableSize", "TfpsTableExport", "TfpsTableImport",
            "TfpsTableMemoryStats", "TfpsTableMemorySplit", "TfpsSetPrefetchMode", "TfpsTableEvict", "TfpsTableExportDelta", "TfpsTableImportDelta",
            "TfpsTableInitialize", "TfpsTableIsInitialized", "TfpsTableTrackRemoved",
            "TfpsTableExportAdmission", "TfpsTableImportAdmission"):
    tf.no_gradient(_op)


def table_handle(dim, initializer="zeros", init_a=0.0, init_b=0.0, seed=0, shared_name="",
                 container="", admit_min_count=1, shard=0, num_shards=1, admit_sketch_width=2**20, name=None):
    """Handle of a table (created on first run) holding the keys with floormod(key, num_shards)
    == shard. Returns: resource scalar."""
    if initializer not in _INITIALIZERS:
        raise ValueError(f"table_handle: initializer must be one of {_INITIALIZERS}, got {initializer!r}")
    return load().tfps_table_handle(dim=int(dim), initializer=initializer, init_a=float(init_a),
                                    init_b=float(init_b), seed=int(seed), shared_name=shared_name,
                                    container=container, admit_min_count=int(admit_min_count),
                                    admit_sketch_width=int(admit_sketch_width),
                                    shard=int(shard), num_shards=int(num_shards), name=name)


def table_initialize(table, name=None):
    """Marks a fresh table initialized (an import marks it too). Returns the op."""
    return load().tfps_table_initialize(table, name=name)


def table_is_initialized(table, name=None):
    """bool scalar: whether table_initialize or an import has run on the table."""
    return load().tfps_table_is_initialized(table, name=name)


def table_find(table, keys, insert=True, missing_zeros=False, counts=None, name=None):
    """keys: int64 [N] -> values: float32 [N, dim]. counts: None, or int32 [N] sightings per key
    (admission)."""
    counts = tf.zeros([0], tf.int32) if counts is None else counts
    return load().tfps_table_find(table, keys, counts, insert=insert, missing_zeros=missing_zeros, name=name)


def table_lookup_unique(table, ids, insert=True, missing_zeros=False, name=None):
    """ids: int64 [N] -> (unique_ids int64 [U], inverse int32 [N], unique_values float32 [U, dim])."""
    return load().tfps_table_lookup_unique(table, ids, insert=insert, missing_zeros=missing_zeros,
                                           name=name)


def gather_rows(params, indices, name=None):
    """params: float32 [U, D], indices: int32 [N] -> float32 [N, D] (tf.gather on axis 0).

    Differentiable in params like tf.gather (the gradient is IndexedSlices)."""
    return load().tfps_gather_rows(params, indices, name=name)


def scatter_add_rows(data, indices, num_rows, name=None):
    """data: float32 [N, D], indices: int32 [N] -> [num_rows, D], rows of equal index summed."""
    return load().tfps_scatter_add_rows(data, indices, tf.cast(num_rows, tf.int64), name=name)


@tf.RegisterGradient("TfpsGatherRows")
def _gather_rows_grad(op, grad):
    # Dense [U, D]: one row per unique id, summed here in parallel, which is what the
    # optimizers want (an IndexedSlices would be summed later by a single-threaded op).
    params, indices = op.inputs
    return scatter_add_rows(grad, indices, tf.shape(params, out_type=tf.int64)[0]), None


def table_assign(table, keys, values, name=None):
    """keys: int64 [N], values: float32 [N, dim]. Returns the op."""
    return load().tfps_table_assign(table, keys, values, name=name)


def table_remove(table, keys, name=None):
    """keys: int64 [N] -> removed: int64 scalar."""
    return load().tfps_table_remove(table, keys, name=name)


def table_size(table, name=None):
    """-> int64 scalar."""
    return load().tfps_table_size(table, name=name)


def table_export(table, name=None):
    """-> (keys [N], values [N, dim], slots [N, k*dim], freq [N], last_step [N], slot_init [k])."""
    return load().tfps_table_export(table, name=name)


def table_import(table, keys, values, slots, freq, last_step, slot_init, name=None):
    """Replaces the table's contents (the inverse of table_export). Returns the op."""
    return load().tfps_table_import(table, keys, values, slots, freq, last_step, slot_init, name=name)


def table_memory_stats(table, name=None):
    """-> int64 [6]: rows, bytes_reserved, bytes_in_use, row_bytes, pending (not yet admitted),
    removed_logged (keys in the removed-keys log of incremental checkpoints)."""
    return load().tfps_table_memory_stats(table, name=name)


def set_prefetch_mode(table, mode, name=None):
    """An op that sets how one table shard prefetches on its batch paths: "rolling" (the
    default), "group" or "off" (results never depend on it; benchmarks compare them). Running it
    returns the mode it replaced. (EmbeddingVariable.set_prefetch_mode does every shard.)"""
    if mode not in ("off", "group", "rolling"):
        raise ValueError(f"set_prefetch_mode: mode must be off, group or rolling, got {mode!r}")
    return load().tfps_set_prefetch_mode(table, mode=mode, name=name)


def table_memory_split(table, name=None):
    """-> int64 [5]: where table_memory_stats' bytes_reserved goes: index_bytes (4-byte slots: row
    id and hash tag), row_bytes_in_use (rows * row_bytes: key, values, optimizer slots, meta),
    meta_bytes (8 per row, part of the rows), arena_slack_bytes (arena pages holding no row),
    side_bytes (admission sketch, removed-keys log)."""
    return load().tfps_table_memory_split(table, name=name)


def table_evict(table, step, evict_after_steps=-1, evict_min_freq=-1, evict_l2_below=-1.0, max_rows=-1,
                cap_policy="lfu", name=None):
    """Removes rows by age, update count, L2 norm and/or to a row cap (-1: rule off) -> evicted int64."""
    return load().tfps_table_evict(table, step, evict_after_steps=int(evict_after_steps),
                                   evict_min_freq=int(evict_min_freq), evict_l2_below=float(evict_l2_below),
                                   max_rows=int(max_rows), cap_policy=cap_policy, name=name)


def table_export_delta(table, since_step, name=None):
    """Rows updated at or after since_step, and keys removed since the last reset:
    (keys, values, slots, freq, last_step, slot_init, removed, complete). complete (bool scalar):
    the removed-keys log overflowed, so the delta holds every row and replaces the table."""
    return load().tfps_table_export_delta(table, since_step, name=name)


def table_import_delta(table, keys, values, slots, freq, last_step, slot_init, removed, complete=False,
                       name=None):
    """Applies a delta: removes `removed`, then writes the rows (complete: replaces the
    contents). Returns the op."""
    return load().tfps_table_import_delta(table, keys, values, slots, freq, last_step, slot_init, removed,
                                          complete, name=name)


def table_track_removed(table, step, on=True, name=None):
    """Starts (or stops) logging removed keys for deltas; step: int64 scalar, the current global
    step (the earliest stamp of a removal from now on). Returns the op."""
    return load().tfps_table_track_removed(table, tf.cast(step, tf.int64), on=bool(on), name=name)


def table_export_admission(table, name=None):
    """-> int32 [S]: the admission sketch (S = 0 without admission)."""
    return load().tfps_table_export_admission(table, name=name)


def table_import_admission(table, counts, name=None):
    """Replaces the admission sketch with counts int32 [S]. Returns the op."""
    return load().tfps_table_import_admission(table, counts, name=name)


def table_restore_stage(table, prefix, table_name, slice_bytes=8 << 20, name=None):
    """Builds one shard's contents from table `table_name` of the checkpoint at `prefix` (any
    shard count), reading in slices only the parts that can hold its keys; the table is unchanged
    until table_restore_commit. -> int64 rows staged."""
    return load().tfps_table_restore_stage(table, prefix, table_name=table_name, slice_bytes=int(slice_bytes),
                                           name=name)


def table_restore_commit(table, staged, name=None):
    """Puts in what table_restore_stage staged (`staged`: its output, after every shard's). Returns the op."""
    return load().tfps_table_restore_commit(table, staged, name=name)


def read_column(prefix, table_name, column, dtype, name=None):
    """Column `column` of table `table_name` (NAME, or NAME-delta in a delta) of the checkpoint at
    `prefix`, its parts concatenated."""
    return load().tfps_read_column(prefix, table_name=table_name, column=column, dtype=dtype, name=name)


def table_apply_delta(table, prefix, table_name, name=None):
    """Applies one shard's share of table `table_name` in the delta at `prefix` (any shard count
    wrote it): removals and rows of its keys, or its rows in place of the shard's when the delta
    is complete; and the admission sketch. Returns the op."""
    return load().tfps_table_apply_delta(table, prefix, table_name=table_name, name=name)
