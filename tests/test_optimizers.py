"""Training through table lookups equals the same model on a tf.Variable with tf.compat.v1.train."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from initializer_reference import init_rows

DIM, STEPS, BATCH = 4, 20, 16


def _batches():
    rng = np.random.default_rng(7)
    vocab = np.array([5, -9, 2**40 + 3, 77, 0, -2**62, 12, 31, 1000, 4], np.int64)
    # Zipf-ish: a few ids repeat a lot, so batches have duplicates (summed into one update).
    p = 1.0 / np.arange(1, len(vocab) + 1)
    idx = rng.choice(len(vocab), size=(STEPS, BATCH, 2), p=p / p.sum())
    labels = rng.integers(0, 2, (STEPS, BATCH, 1)).astype(np.float32)
    return vocab, idx, labels


def _train(opt_name, use_tables, num_shards=1, two_lookups=False):
    """Trains 20 steps; returns (rows of the vocab [V, DIM], dense weights)."""
    vocab, idx, labels = _batches()
    g = tf.Graph()
    with g.as_default():
        ids_ph = tf.compat.v1.placeholder(tf.int64, [BATCH, 2])
        idx_ph = tf.compat.v1.placeholder(tf.int32, [BATCH, 2])
        y = tf.compat.v1.placeholder(tf.float32, [BATCH, 1])
        init = tf.compat.v1.random_normal_initializer(stddev=0.5, seed=3)
        if use_tables:
            ev = tfps.get_embedding_variable("emb", DIM, initializer=init, num_shards=num_shards)
            if two_lookups:
                # Two features sharing one table: their gradients are merged per id.
                emb = tf.concat([tfps.embedding_lookup(ev, ids_ph[:, :1]),
                                 tfps.embedding_lookup(ev, ids_ph[:, 1:])], 1)
            else:
                emb = tfps.embedding_lookup(ev, ids_ph)
            opt_mod = tfps.train
        else:
            spec = tfps.get_embedding_variable("spec_only", DIM, initializer=init).initializer_spec
            table = tf.compat.v1.get_variable("table", initializer=init_rows(spec, vocab, DIM))
            emb = tf.nn.embedding_lookup(table, idx_ph)
            opt_mod = tf.compat.v1.train
        w = tf.compat.v1.get_variable("w", initializer=np.linspace(-1, 1, 2 * DIM, dtype=np.float32)[:, None])
        logits = tf.matmul(tf.reshape(emb, [BATCH, 2 * DIM]), w)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        gs = tf.compat.v1.train.get_or_create_global_step()
        opt = {"sgd": lambda m: m.GradientDescentOptimizer(0.5),
               "adagrad": lambda m: m.AdagradOptimizer(0.3, initial_accumulator_value=0.2)}[opt_name](opt_mod)
        train_op = opt.minimize(loss, global_step=gs)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for t in range(STEPS):
                s.run(train_op, {ids_ph: vocab[idx[t]], idx_ph: idx[t], y: labels[t]})
            assert s.run(gs) == STEPS
            if use_tables:
                rows = s.run(tfps.embedding_lookup(ev, vocab, insert=False))
            else:
                rows = s.run(table)
            return rows, s.run(w)


@pytest.mark.parametrize("opt", ["sgd", "adagrad"])
def test_tables_train_like_tf_variable(opt):
    rows, w = _train(opt, use_tables=True)
    ref_rows, ref_w = _train(opt, use_tables=False)
    np.testing.assert_allclose(rows, ref_rows, atol=1e-5)
    np.testing.assert_allclose(w, ref_w, atol=1e-5)
    # Training moved the rows away from their initial values.
    vocab, _, _ = _batches()
    with tf.Graph().as_default():
        spec = tfps.get_embedding_variable("e", DIM, initializer=tf.compat.v1.random_normal_initializer(
            stddev=0.5, seed=3)).initializer_spec
    assert np.abs(rows - init_rows(spec, vocab, DIM)).max() > 1e-2


@pytest.mark.parametrize("opt", ["sgd", "adagrad"])
def test_three_shards_and_shared_table_train_identically(opt):
    rows, w = _train(opt, use_tables=True)
    rows3, w3 = _train(opt, use_tables=True, num_shards=3)
    rows_two, w_two = _train(opt, use_tables=True, num_shards=2, two_lookups=True)
    np.testing.assert_allclose(rows3, rows, atol=1e-6)
    np.testing.assert_allclose(w3, w, atol=1e-6)
    np.testing.assert_allclose(rows_two, rows, atol=1e-6)
    np.testing.assert_allclose(w_two, w, atol=1e-6)


def test_gradients_keyed_by_id(graph):
    ev = tfps.get_embedding_variable("e", 2, initializer=tf.compat.v1.ones_initializer())
    out = tfps.embedding_lookup(ev, tf.constant([3, 8, 3], tf.int64))
    loss = tf.reduce_sum(out * tf.constant([[1.0], [2.0], [4.0]]))
    opt = tfps.train.GradientDescentOptimizer(1.0)
    (grad, var), = opt.compute_gradients(loss)
    assert isinstance(var, tfps.embedding.TableShard) and var.variable is ev
    with tf.compat.v1.Session() as s:
        keys, rows = s.run([grad.indices, grad.values])
    got = {int(k): r.tolist() for k, r in zip(keys, rows)}
    assert got == {3: [5.0, 5.0], 8: [2.0, 2.0]}


def test_no_trainable_lookup_is_a_clear_error(graph):
    ev = tfps.get_embedding_variable("e", 2, trainable=False)
    loss = tf.reduce_sum(tfps.embedding_lookup(ev, tf.constant([1], tf.int64)))
    with pytest.raises(ValueError, match="No variables to optimize"):
        tfps.train.AdagradOptimizer(0.1).minimize(loss)
