"""tfps.get_embedding_variable / embedding_lookup / embedding_lookup_sparse against oracles."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from initializer_reference import init_rows

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def test_lookup_any_shape_equals_initializer(graph):
    ev = tfps.get_embedding_variable("emb", 6, initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
    ids = np.array([[1, 5, 5], [I64_MIN, -3, I64_MAX]], np.int64)
    out = tfps.embedding_lookup(ev, ids)
    assert out.shape.as_list() == [2, 3, 6]
    with tf.compat.v1.Session() as s:
        got = s.run(out)
        assert s.run(ev.size()) == 5
    want = init_rows(ev.initializer_spec, ids.ravel(), 6).reshape(2, 3, 6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_empty_batch_and_scalar_ids(graph):
    ev = tfps.get_embedding_variable("emb", 3)
    empty = tfps.embedding_lookup(ev, tf.zeros([0, 4], tf.int64))
    scalar = tfps.embedding_lookup(ev, tf.constant(7, tf.int64))
    with tf.compat.v1.Session() as s:
        e, sc = s.run([empty, scalar])
    assert e.shape == (0, 4, 3) and sc.shape == (3,)
    np.testing.assert_allclose(sc, init_rows(ev.initializer_spec, [7], 3)[0], rtol=1e-6)


def test_assigned_keys_read_back_and_int32_ids(graph):
    ev = tfps.get_embedding_variable("emb", 2, initializer=tf.compat.v1.zeros_initializer())
    assign = ev.assign(tf.constant([10, 20], tf.int64), [[1.0, 2.0], [3.0, 4.0]])
    out = tfps.embedding_lookup(ev, tf.constant([20, 10, 30], tf.int32))
    with tf.compat.v1.Session() as s:
        s.run(assign)
        np.testing.assert_array_equal(s.run(out), [[3, 4], [1, 2], [0, 0]])


def test_string_keys_are_hashed(graph):
    ev = tfps.get_embedding_variable("words", 4, key_dtype=tf.string)
    out = tfps.embedding_lookup(ev, tf.constant(["a", "b", "a"]))
    with tf.compat.v1.Session() as s:
        got = s.run(out)
        assert s.run(ev.size()) == 2
        keys = s.run(tf.strings.to_hash_bucket_fast(["a", "b"], 2**63 - 1))
    np.testing.assert_array_equal(got[0], got[2])
    np.testing.assert_allclose(got[:2], init_rows(ev.initializer_spec, keys, 4), rtol=1e-6)


def test_variable_scope_reuse_and_device(graph):
    with tf.compat.v1.variable_scope("tower"), tf.device("/cpu:0"):
        a = tfps.get_embedding_variable("e", 4)
    assert a.name == "tower/e" and "CPU:0" in a.handles[0].device.upper()
    with tf.compat.v1.variable_scope("tower", reuse=True):
        assert tfps.get_embedding_variable("e", 4) is a
        with pytest.raises(ValueError, match="does not exist"):
            tfps.get_embedding_variable("f", 4)
    with tf.compat.v1.variable_scope("tower", reuse=tf.compat.v1.AUTO_REUSE):
        assert tfps.get_embedding_variable("e", 4) is a
    with tf.compat.v1.variable_scope("tower"):
        with pytest.raises(ValueError, match="already exists"):
            tfps.get_embedding_variable("e", 4)
    assert tfps.embedding_variables() == [a]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_lookup_sparse_matches_tf(graph, combiner, weighted):
    ev = tfps.get_embedding_variable("emb", 5)
    vocab = np.array([3, 8, -2, 100], np.int64)
    # Row 2 is empty, row 4 is the last present: TF returns 5 rows.
    sp = tf.SparseTensor([[0, 0], [0, 1], [1, 0], [3, 0], [3, 1], [3, 2], [4, 0]],
                         tf.constant([3, 8, 8, -2, 100, 3, 100], tf.int64), [6, 3])
    w = tf.SparseTensor(sp.indices, [1.0, 2.0, 0.5, 1.5, 1.0, 3.0, 2.0], sp.dense_shape) if weighted else None
    ours = tfps.embedding_lookup_sparse(ev, sp, w, combiner=combiner)
    table = tf.constant(init_rows(ev.initializer_spec, vocab, 5))
    idx_sp = tf.SparseTensor(sp.indices, tf.constant([0, 1, 1, 2, 3, 0, 3], tf.int64), sp.dense_shape)
    theirs = tf.nn.embedding_lookup_sparse(table, idx_sp, w, combiner=combiner)
    with tf.compat.v1.Session() as s:
        a, b = s.run([ours, theirs])
    assert a.shape == b.shape == (5, 5)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sharded_lookup_equals_unsharded(graph):
    ids_np = np.random.default_rng(2).integers(-1000, 1000, (64, 3))
    ids = tf.constant(ids_np, tf.int64)
    one = tfps.get_embedding_variable("one", 4, initializer=tf.compat.v1.random_normal_initializer(seed=9))
    three = tfps.get_embedding_variable("three", 4, num_shards=3,
                                        initializer=tf.compat.v1.random_normal_initializer(seed=9))
    a, b = tfps.embedding_lookup(one, ids), tfps.embedding_lookup(three, ids)
    with tf.compat.v1.Session() as s:
        x, y = s.run([a, b])
        sizes = s.run([tfps.ops.embedding_table.table_size(h) for h in three.handles])
    np.testing.assert_array_equal(x, y)
    assert sum(sizes) == len(np.unique(ids_np))
    assert min(sizes) > 0


def test_bad_ids_raise_invalid_argument(graph):
    ev = tfps.get_embedding_variable("emb", 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="integer tensor"):
        tfps.embedding_lookup(ev, tf.constant([1.0, 2.0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="integer tensor"):
        tfps.embedding_lookup(ev, tf.constant(["a"]))
    words = tfps.get_embedding_variable("words", 3, key_dtype=tf.string)
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be tf.string"):
        tfps.embedding_lookup(words, tf.constant([1], tf.int64))
    with pytest.raises(ValueError, match="embedding_dim must be > 0"):
        tfps.get_embedding_variable("bad", 0)
    with pytest.raises(ValueError, match="no vocabulary size"):
        tfps.get_embedding_variable("bad2", 3, initializer=tf.compat.v1.orthogonal_initializer())


@pytest.mark.parametrize("make", [
    lambda: tf.compat.v1.random_uniform_initializer(),          # maxval None: TF's default 1
    lambda: tf.compat.v1.random_uniform_initializer(-0.5),
    lambda: tf.keras.initializers.RandomUniform(),
    lambda: tf.compat.v1.random_normal_initializer(),
    lambda: tf.compat.v1.truncated_normal_initializer(),
    lambda: tf.compat.v1.constant_initializer(0.5),
    lambda: tf.compat.v1.zeros_initializer(),
    lambda: tf.compat.v1.ones_initializer()])
def test_tf_initializers_with_their_defaults_work(graph, make):
    """Every initializer TF offers for get_variable either initializes rows within its own range
    (TF's initializer on a [4096, 8] variable is the oracle for the range) or is refused clearly."""
    init = make()
    ev = tfps.get_embedding_variable("emb", 8, initializer=init)
    rows = tfps.embedding_lookup(ev, tf.range(4096, dtype=tf.int64))
    ref = tf.compat.v1.get_variable("ref", [4096, 8], initializer=make())
    with tf.compat.v1.Session() as s:
        s.run(tf.compat.v1.global_variables_initializer())
        got, want = s.run([rows, ref])
    q = [0.01, 0.25, 0.5, 0.75, 0.99]
    np.testing.assert_allclose(np.quantile(got, q), np.quantile(want, q), atol=0.03 + 0.05 * want.std())
    np.testing.assert_allclose(got.std(), want.std(), atol=0.03)


@pytest.mark.parametrize("make", [tf.compat.v1.glorot_uniform_initializer, tf.compat.v1.glorot_normal_initializer,
                                  tf.compat.v1.variance_scaling_initializer, tf.keras.initializers.HeNormal,
                                  tf.keras.initializers.LecunUniform])
def test_fan_based_initializers_are_refused_with_a_way_out(graph, make):
    with pytest.raises(ValueError, match=r"no vocabulary size.*stddev=0.25"):
        tfps.get_embedding_variable("emb", 16, initializer=make())


def test_sparse_weights_must_pair_with_ids(graph):
    """One weight for three ids: tf.nn.embedding_lookup_sparse refuses it; so does tfps."""
    ev = tfps.get_embedding_variable("emb", 3)
    ids = tf.SparseTensor([[0, 0], [0, 1], [1, 0]], tf.constant([1, 2, 3], tf.int64), [2, 2])
    one = tf.SparseTensor([[0, 0]], [2.0], [2, 2])
    shifted = tf.SparseTensor([[0, 0], [0, 1], [1, 1]], [1.0, 1.0, 1.0], [2, 2])
    with tf.compat.v1.Session() as s:
        for weights in (one, shifted):
            with pytest.raises(tf.errors.InvalidArgumentError, match="same indices as sp_ids"):
                s.run(tfps.embedding_lookup_sparse(ev, ids, weights, combiner="mean"))
