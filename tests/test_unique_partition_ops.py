"""TfpsUniquePartition against tf.unique + tf.dynamic_partition (partitions = ids % P)."""
import numpy as np
import pytest
import tensorflow as tf

from tfps.ops.unique_partition_ops import unique_partition, unique_partition_with_counts

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _cases():
    rng = np.random.default_rng(0)
    zipf = (rng.zipf(1.2, 300_000) * 7919).astype(np.int64)
    return {
        "empty": np.zeros(0, np.int64),
        "one": np.array([42], np.int64),
        "all_equal": np.full(50_000, -7, np.int64),
        "all_distinct": rng.permutation(200_000).astype(np.int64) * 3 - 100_000,
        "extremes": np.array([I64_MIN, I64_MAX, 0, -1, I64_MIN, 1, I64_MAX, -1], np.int64),
        "negatives": rng.integers(-1000, 0, 5000).astype(np.int64),
        "zipf_large": zipf,
        "random_small": rng.integers(-20, 20, 100).astype(np.int64),
        "strided": np.arange(0, 80_000, 8, dtype=np.int64).repeat(3),
    }


@pytest.mark.parametrize("case", list(_cases()))
@pytest.mark.parametrize("p", [1, 3, 8, 1000])
def test_matches_tf_unique_and_dynamic_partition(graph, case, p):
    ids = _cases()[case]
    uniq, inverse, offsets, counts = unique_partition_with_counts(ids, p)
    ref_parts = tf.dynamic_partition(ids, tf.cast(tf.math.floormod(ids, p), tf.int32), p)
    ref_uniq = [tf.unique(part)[0] for part in ref_parts]  # first-occurrence order within the partition
    with tf.compat.v1.Session() as s:
        u, inv, off, cnt, ref = s.run([uniq, inverse, offsets, counts, ref_uniq])
    assert off.shape == (p + 1,) and off[0] == 0 and off[-1] == len(u)
    for q in range(p):
        np.testing.assert_array_equal(u[off[q]:off[q + 1]], ref[q], err_msg=f"partition {q}")
    np.testing.assert_array_equal(u[inv], ids)
    values, ref_counts = np.unique(ids, return_counts=True)
    got = dict(zip(u.tolist(), cnt.tolist()))
    assert [got[v] for v in values.tolist()] == ref_counts.tolist()


def test_hash_strategy_spreads_strided_ids(graph):
    ids = np.arange(0, 8 * 100_000, 8, dtype=np.int64)  # all multiples of P
    _, _, mod_off = unique_partition(ids, 8)
    u, inv, hash_off = unique_partition(ids, 8, strategy="hash")
    with tf.compat.v1.Session() as s:
        mod_off, hash_off, u, inv = s.run([mod_off, hash_off, u, inv])
    assert np.diff(mod_off).max() == len(ids)              # mod: everything in partition 0
    assert np.abs(np.diff(hash_off) - len(ids) / 8).max() < 0.02 * len(ids) / 8
    np.testing.assert_array_equal(u[inv], ids)


def test_int64_inverse(graph):
    ids = np.array([3, 1, 3, 2], np.int64)
    u, inv, off = unique_partition(ids, 2, out_idx=tf.int64)
    assert inv.dtype == tf.int64
    with tf.compat.v1.Session() as s:
        u, inv = s.run([u, inv])
    np.testing.assert_array_equal(u[inv], ids)


def test_bad_inputs(graph):
    for p in (0, -2, 1.5, True):
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_partitions must be a positive int"):
            unique_partition([1, 2], p)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ids must be int64"):
        unique_partition(tf.constant([1.0, 2.0]), 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="strategy must be one of"):
        unique_partition([1], 2, strategy="range")
    ids = tf.compat.v1.placeholder(tf.int64)
    with tf.compat.v1.Session() as s:
        with pytest.raises(tf.errors.InvalidArgumentError, match="ids must be a vector"):
            s.run(unique_partition(ids, 2)[0], {ids: [[1, 2]]})
        # Absurd partition counts are refused, not a segfault (2^40) or an OOM kill (2^31).
        for p in (2**40, 2**31, 65537):
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"num_partitions must be in \[1, 65536\]"):
                s.run(unique_partition([1, 2], p)[0])


def test_callable_as_named_in_the_package(graph):
    import tfps
    ids = tf.constant([5, 3, 5, 8], tf.int64)
    u, inv, off = tfps.ops.unique_partition(ids, 2, strategy="mod")
    with tf.compat.v1.Session() as s:
        u, inv, off = s.run([u, inv, off])
    np.testing.assert_array_equal(u[inv], [5, 3, 5, 8])
    assert sorted(u[off[0]:off[1]].tolist()) == [8] and sorted(u[off[1]:off[2]].tolist()) == [3, 5]
