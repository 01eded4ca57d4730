"""Lookups on EmbeddingVariables: dedup, one probe per distinct id per shard, gather back."""
import tensorflow as tf

from tfps.embedding.model_graph import ModelGraph, TableLookup
from tfps.ops import embedding_table as table_ops
from tfps.ops.unique_partition_ops import unique_partition_with_counts


def _check(ev):
    # Duck-typed: the variable module builds on this one, not the other way round.
    if not all(hasattr(ev, a) for a in ("handles", "dim", "num_shards", "to_keys")):
        raise TypeError(f"expected a tfps.EmbeddingVariable, got {type(ev).__name__}")


def probe(ev, keys, insert, after=None):
    """keys int64 [N] -> (unique_keys int64 [U], inverse int32 [N], offsets, rows float32 [U, dim]),
    one probe per distinct key. after: None, or {table handle name: ops} that the probe of that
    shard runs after (the pipeline orders a probe ahead after the same step's push).

    One shard: a fused dedup + probe op, offsets None. k shards: unique_partition groups the
    distinct keys by shard (floormod(key, k)), each shard is probed on its own device, and the
    concatenated rows line up with the grouped unique keys; shard p owns positions
    offsets[p]:offsets[p+1] (int64 [k + 1])."""
    after = after or {}
    if ev.num_shards == 1:
        handle = ev.handles[0]
        with tf.compat.v1.get_default_graph().colocate_with(handle.op), \
                tf.control_dependencies(after.get(handle.name, [])):
            uids, inverse, uvals = table_ops.table_lookup_unique(handle, keys, insert=insert)
        uvals.set_shape([None, ev.dim])
        return uids, inverse, None, uvals
    uids, inverse, offsets, counts = unique_partition_with_counts(keys, ev.num_shards)
    sizes = offsets[1:] - offsets[:-1]
    admit = insert and ev.options.admit_min_count > 1
    parts = tf.split(uids, sizes, num=ev.num_shards)
    part_counts = tf.split(counts, sizes, num=ev.num_shards) if admit else [None] * ev.num_shards
    rows = []
    for handle, part, part_count in zip(ev.handles, parts, part_counts):
        with tf.compat.v1.get_default_graph().colocate_with(handle.op), \
                tf.control_dependencies(after.get(handle.name, [])):
            rows.append(table_ops.table_find(handle, part, insert=insert, counts=part_count))
    uvals = tf.concat(rows, 0)
    uvals.set_shape([None, ev.dim])
    return uids, inverse, offsets, uvals


def _lookup_flat(ev, keys, insert, step=None):
    """keys int64 [N] -> float32 [N, dim]; adds (unique_ids, unique_values) to `step` (default:
    the graph's ModelGraph's step) for training.

    The probe runs here, or -- when the step has a stager (a tfps pipeline) -- ahead, on a later
    batch, and its staged result is read here (tfps.pipeline). A table of a stock graph
    (tfps.embedding.stock) is read in stock ops, and only read."""
    if getattr(ev, "stock", None) is not None:
        if insert:
            raise ValueError(f"table {ev.name!r} is a stock table (a serving export's): it is read with "
                             f"insert=False, never trained")
        return ev.stock.lookup(keys)
    step = step or ModelGraph.of().step
    staged = step.stager.stage(ev, keys, insert, probe) if step.stager is not None else None
    uids, inverse, offsets, uvals = staged if staged is not None else probe(ev, keys, insert)
    if insert and ev.trainable:
        step.record(TableLookup(ev, uids, uvals, offsets=offsets))
    return table_ops.gather_rows(uvals, inverse)


def embedding_lookup(ev, ids, insert=True, name=None, step=None):
    """Rows of `ids` in `ev`.

    Args:
      ev: tfps.EmbeddingVariable.
      ids: int64/int32 (or string, for string-keyed ev) tensor of any shape, any values.
      insert: True while training (a new id gets a row); False for serving (the table is not
        changed and a missing id reads as its initializer value).
      step: the tfps.embedding.TrainingStep the lookup belongs to (hand the same one to the
        optimizer's minimize); None: the graph's own.

    Returns:
      float32 ids.shape + [dim]. Example: ids [[1, 5], [5, 9]] with dim 4 -> [2, 2, 4].
    """
    _check(ev)
    with tf.compat.v1.name_scope(name, "embedding_lookup"):
        keys = ev.to_keys(ids)
        flat = tf.reshape(keys, [-1])
        rows = _lookup_flat(ev, flat, insert, step)
        out = tf.reshape(rows, tf.concat([tf.shape(keys, out_type=tf.int32), [ev.dim]], 0))
        out.set_shape(keys.shape.concatenate([ev.dim]))
        return out


def embedding_lookup_sparse(ev, sp_ids, sp_weights=None, combiner="mean", insert=True, name=None, step=None):
    """Combined rows per example, with the semantics of tf.nn.embedding_lookup_sparse.

    Args:
      sp_ids: SparseTensor [B, L] of ids (row-major ordered, as tf.sparse.reorder gives).
      sp_weights: None, or a SparseTensor of float weights with the same indices.
      combiner: "sum", "mean" or "sqrtn".
      step: as for embedding_lookup.

    Returns:
      float32 [R, dim] where R = 1 + the largest row index present (rows with no ids are zeros),
      exactly as tf.nn.embedding_lookup_sparse.
    """
    _check(ev)
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"embedding_lookup_sparse: combiner must be sum, mean or sqrtn, got {combiner!r}")
    if not isinstance(sp_ids, tf.SparseTensor):
        raise TypeError(f"embedding_lookup_sparse: sp_ids must be a SparseTensor, got {type(sp_ids).__name__}")
    with tf.compat.v1.name_scope(name, "embedding_lookup_sparse"):
        rows = _lookup_flat(ev, ev.to_keys(sp_ids.values), insert, step)
        return combine_sparse(rows, sp_ids, sp_weights, combiner)


def _checked_weights(sp_ids, sp_weights):
    """sp_weights' values as float32 [nnz], after checking (InvalidArgumentError) that they pair
    with sp_ids one to one -- the same indices -- as tf.nn.embedding_lookup_sparse requires."""
    weights = tf.cast(sp_weights.values, tf.float32)
    message = "embedding_lookup_sparse: sp_weights must have the same indices as sp_ids (one weight per id)"
    same_count = tf.debugging.assert_equal(tf.shape(sp_weights.indices), tf.shape(sp_ids.indices), message=message)
    with tf.control_dependencies([same_count]):
        check = tf.debugging.assert_equal(sp_weights.indices, sp_ids.indices, message=message)
    with tf.control_dependencies([check]):
        return tf.identity(weights)


def combine_sparse(rows, sp_ids, sp_weights, combiner):
    """rows float32 [nnz, dim] of sp_ids' values -> [R, dim] combined per example, as
    tf.nn.embedding_lookup_sparse does (R = 1 + the largest row index present)."""
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"embedding_lookup_sparse: combiner must be sum, mean or sqrtn, got {combiner!r}")
    segment_ids = tf.cast(sp_ids.indices[:, 0], tf.int32)
    if sp_weights is None:
        positions = tf.range(tf.shape(rows)[0])
        fn = {"sum": tf.sparse.segment_sum, "mean": tf.sparse.segment_mean,
              "sqrtn": tf.sparse.segment_sqrt_n}[combiner]
        return fn(rows, positions, segment_ids)
    weights = _checked_weights(sp_ids, sp_weights)
    summed = tf.math.segment_sum(rows * weights[:, None], segment_ids)
    if combiner == "sum":
        return summed
    if combiner == "mean":
        denom = tf.math.segment_sum(weights, segment_ids)
    else:
        denom = tf.sqrt(tf.math.segment_sum(weights * weights, segment_ids))
    return tf.math.divide_no_nan(summed, denom[:, None])


def combine_padded(rows, sp_ids, sp_weights, combiner):
    """As combine_sparse, but always [dense_shape[0], dim]: examples without ids get zeros, as
    tf.feature_column.embedding_column gives."""
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"combiner must be sum, mean or sqrtn, got {combiner!r}")
    segment_ids = tf.cast(sp_ids.indices[:, 0], tf.int32)
    n = tf.cast(sp_ids.dense_shape[0], tf.int32)
    weights = (tf.ones_like(segment_ids, tf.float32) if sp_weights is None
               else _checked_weights(sp_ids, sp_weights))
    summed = tf.math.unsorted_segment_sum(rows * weights[:, None], segment_ids, n)
    if combiner == "sum":
        return summed
    w = weights if combiner == "mean" else weights * weights
    denom = tf.math.unsorted_segment_sum(w, segment_ids, n)
    return tf.math.divide_no_nan(summed, (denom if combiner == "mean" else tf.sqrt(denom))[:, None])
