"""Wrappers of TfpsUniquePartition(WithCounts) (kernels/unique_partition_kernels.cc)."""
import tensorflow as tf

from tfps.ops._loader import load

STRATEGIES = ("mod", "hash")

TAG_BITS = 48          # ids below 2^48 keep their value in the low bits of a tagged key
MAX_TAG = (1 << 15) - 1

for _op in ("TfpsUniquePartition", "TfpsUniquePartitionWithCounts", "TfpsFeatureTag"):
    tf.no_gradient(_op)


def _prepare(ids, num_partitions, strategy, out_idx):
    if not isinstance(num_partitions, int) or isinstance(num_partitions, bool) or num_partitions <= 0:
        raise tf.errors.InvalidArgumentError(
            None, None, f"unique_partition: num_partitions must be a positive int, got {num_partitions!r}")
    if strategy not in STRATEGIES:
        raise tf.errors.InvalidArgumentError(
            None, None, f"unique_partition: strategy must be one of {STRATEGIES}, got {strategy!r}")
    ids = tf.convert_to_tensor(ids)
    if ids.dtype == tf.int32:
        ids = tf.cast(ids, tf.int64)
    if ids.dtype != tf.int64:
        raise tf.errors.InvalidArgumentError(
            None, None, f"unique_partition: ids must be int64 (or int32), got {ids.dtype.name}")
    if out_idx is None:
        n = ids.shape.num_elements() if ids.shape.rank == 1 else None
        out_idx = tf.int64 if n is not None and n >= 2**31 else tf.int32
    return ids, out_idx


def unique_partition(ids, num_partitions, strategy="mod", out_idx=None, name=None):
    """Dedups ids and groups the unique ids by partition.

    Args:
      ids: int64 [N] (int32 is widened).
      num_partitions: P >= 1.
      strategy: "mod" (partition = floormod(id, P)) or "hash" (a salted splitmix64 of the id,
        see ops/unique_partition_ops.cc), which spreads ids sharing a stride evenly.
      out_idx: dtype of inverse; None: int32, or int64 when N >= 2^31 is known statically.

    Returns:
      (unique_ids int64 [U], inverse [N], offsets int64 [P + 1]); partition p owns
      unique_ids[offsets[p]:offsets[p+1]], ids in order of first occurrence within it, and
      unique_ids[inverse] == ids. Example: ids [5, 2, 5, 4], P=2 -> unique_ids [2, 4, 5],
      inverse [2, 0, 2, 1], offsets [0, 2, 3].
    """
    ids, out_idx = _prepare(ids, num_partitions, strategy, out_idx)
    return load().tfps_unique_partition(ids, num_partitions=num_partitions, strategy=strategy,
                                        out_idx=out_idx, name=name)


def unique_partition_with_counts(ids, num_partitions, strategy="mod", out_idx=None, name=None):
    """unique_partition plus counts: int32 [U], occurrences of each unique id."""
    ids, out_idx = _prepare(ids, num_partitions, strategy, out_idx)
    return load().tfps_unique_partition_with_counts(ids, num_partitions=num_partitions, strategy=strategy,
                                                    out_idx=out_idx, name=name)


def feature_tag(ids, tag, name=None):
    """int64 ids (any shape) -> keys (tag << 48) | id of features in a shared table.

    tag: an int (one feature), or a list of ints, one per column of ids' last dim.

    Ids in [0, 2^48) are kept exactly (zero collisions, recoverable with feature_untag); other ids
    (negative, larger, hashed strings) are mixed into 48 bits: two ids of one feature then collide
    with probability 2^-48 per pair (the bound asked is 2^-40 at 10^9 keys); keys of different
    tags never collide."""
    tags = [int(t) for t in tag] if isinstance(tag, (list, tuple)) else int(tag)
    for t in tags if isinstance(tags, list) else [tags]:
        if not 1 <= t <= MAX_TAG:
            raise ValueError(f"feature_tag: tag must be in [1, {MAX_TAG}], got {t}")
    return load().tfps_feature_tag(ids, tf.constant(tags, tf.int64), name=name)


def feature_untag(keys, tag):
    """(mask, ids) of the keys carrying `tag`: mask bool [N], ids int64 [M] (exact for ids that
    were in [0, 2^48) when tagged)."""
    mask = tf.equal(tf.bitwise.right_shift(keys, tf.constant(TAG_BITS, tf.int64)), tag)
    return mask, tf.bitwise.bitwise_and(tf.boolean_mask(keys, mask), tf.constant((1 << TAG_BITS) - 1, tf.int64))
