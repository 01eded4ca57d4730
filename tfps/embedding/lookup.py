"""Lookups on EmbeddingVariables: dedup, one probe per distinct id per shard, gather back."""
import tensorflow as tf

from tfps.embedding.variable import EmbeddingVariable, LookupRecord
from tfps.ops import embedding_table as table_ops


def _check(ev):
    if not isinstance(ev, EmbeddingVariable):
        raise TypeError(f"expected a tfps.EmbeddingVariable, got {type(ev).__name__}")


def _lookup_flat(ev, keys, insert):
    """keys int64 [N] -> float32 [N, dim]; records (unique_ids, unique_values) for training."""
    def one_shard(shard, shard_keys):
        handle = ev.handles[shard]
        with tf.compat.v1.get_default_graph().colocate_with(handle.op):
            uids, inverse, uvals = table_ops.table_lookup_unique(handle, shard_keys, insert=insert)
        uvals.set_shape([None, ev.dim])
        if insert and ev.trainable:
            ev.records.append(LookupRecord(shard, uids, uvals))
        return table_ops.gather_rows(uvals, inverse)

    if ev.num_shards == 1:
        return one_shard(0, keys)
    shard = ev.shard_of(keys)
    parts = tf.dynamic_partition(keys, shard, ev.num_shards)
    positions = tf.dynamic_partition(tf.range(tf.size(keys)), shard, ev.num_shards)
    return tf.dynamic_stitch(positions, [one_shard(i, p) for i, p in enumerate(parts)])


def embedding_lookup(ev, ids, insert=True, name=None):
    """Rows of `ids` in `ev`.

    Args:
      ev: tfps.EmbeddingVariable.
      ids: int64/int32 (or string, for string-keyed ev) tensor of any shape, any values.
      insert: True while training (a new id gets a row); False for serving (the table is not
        changed and a missing id reads as its initializer value).

    Returns:
      float32 ids.shape + [dim]. Example: ids [[1, 5], [5, 9]] with dim 4 -> [2, 2, 4].
    """
    _check(ev)
    with tf.compat.v1.name_scope(name, "embedding_lookup"):
        keys = ev.to_keys(ids)
        flat = tf.reshape(keys, [-1])
        rows = _lookup_flat(ev, flat, insert)
        out = tf.reshape(rows, tf.concat([tf.shape(keys, out_type=tf.int32), [ev.dim]], 0))
        out.set_shape(keys.shape.concatenate([ev.dim]))
        return out


def embedding_lookup_sparse(ev, sp_ids, sp_weights=None, combiner="mean", insert=True, name=None):
    """Combined rows per example, with the semantics of tf.nn.embedding_lookup_sparse.

    Args:
      sp_ids: SparseTensor [B, L] of ids (row-major ordered, as tf.sparse.reorder gives).
      sp_weights: None, or a SparseTensor of float weights with the same indices.
      combiner: "sum", "mean" or "sqrtn".

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
        segment_ids = tf.cast(sp_ids.indices[:, 0], tf.int32)
        rows = _lookup_flat(ev, ev.to_keys(sp_ids.values), insert)
        if sp_weights is None:
            positions = tf.range(tf.shape(rows)[0])
            fn = {"sum": tf.sparse.segment_sum, "mean": tf.sparse.segment_mean,
                  "sqrtn": tf.sparse.segment_sqrt_n}[combiner]
            return fn(rows, positions, segment_ids)
        weights = tf.cast(sp_weights.values, tf.float32)
        summed = tf.math.segment_sum(rows * weights[:, None], segment_ids)
        if combiner == "sum":
            return summed
        if combiner == "mean":
            denom = tf.math.segment_sum(weights, segment_ids)
        else:
            denom = tf.sqrt(tf.math.segment_sum(weights * weights, segment_ids))
        return tf.math.divide_no_nan(summed, denom[:, None])
