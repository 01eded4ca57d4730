"""tfps.pipeline.replay: the ops between mapped inputs and an output, re-built on other inputs.

Oracle: the original subgraph run on the other inputs."""
import numpy as np
import pytest
import tensorflow as tf

from tfps.ops.unique_partition_ops import feature_tag
from tfps.pipeline.replay import ReplayError, depends_on, replay


def test_replayed_keys_equal_the_originals_computed_on_the_other_batch():
    with tf.Graph().as_default():
        staged = tf.compat.v1.placeholder(tf.int64, [None, 3])
        fresh = tf.compat.v1.placeholder(tf.int64, [None, 3])
        offset = tf.constant(5, tf.int64)
        keys = tf.reshape(feature_tag(staged + offset, [1, 2, 3]), [-1])
        sparse_keys = tf.sparse.from_dense(staged).values * 2
        hashed = tf.strings.to_hash_bucket_fast(tf.strings.as_string(staged[:, 0]), 1000)
        out = replay([keys, sparse_keys, hashed, offset, staged], {staged: fresh})
        assert out[3] is offset                       # not computed from the batch: the same tensor
        assert out[4] is fresh                        # a mapped input itself: its mapping
        assert depends_on(staged, {staged.name})
        assert out[0].shape.as_list() == [None]
        a = np.array([[1, 0, 3], [4, 5, 6]])
        b = np.array([[7, 8, 0]])
        with tf.compat.v1.Session() as s:
            got = s.run(out[:3], {staged: a, fresh: b})
            want = s.run([keys, sparse_keys, hashed], {staged: b})
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert depends_on(keys, {staged.name}) and not depends_on(offset, {staged.name})


def test_keys_computed_from_another_staged_value_are_refused():
    with tf.Graph().as_default():
        staged = tf.compat.v1.placeholder(tf.int64, [None])
        fresh = tf.compat.v1.placeholder(tf.int64, [None])
        queue = tf.queue.FIFOQueue(2, [tf.int64])
        keys = staged + queue.dequeue()
        with pytest.raises(ReplayError, match="QueueDequeueV2"):
            replay([keys], {staged: fresh}, forbidden=("QueueDequeueV2",))
