"""tfps Adam and Ftrl against tf.compat.v1.train (dense and all-rows-present tables) and a numpy
lazy-Adam reference (tables with rows that skip steps); beta powers per PS device."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from initializer_reference import init_rows

DIM, STEPS, V = 3, 20, 6


def _model(use_tables, opt, ids_per_step):
    """A model over V ids trained 20 steps; returns (rows of all V ids, dense weights, grads per step)."""
    rng = np.random.default_rng(11)
    vocab = np.array([7, -3, 2**40, 0, 99, 12], np.int64)
    labels = rng.integers(0, 2, (STEPS, len(ids_per_step[0]), 1)).astype(np.float32)
    with tf.Graph().as_default():
        idx = tf.compat.v1.placeholder(tf.int32, [None])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        init = tf.compat.v1.random_normal_initializer(stddev=0.5, seed=2)
        if use_tables:
            ev = tfps.get_embedding_variable("emb", DIM, initializer=init)
            emb = tfps.embedding_lookup(ev, tf.gather(vocab, idx))
        else:
            spec = tfps.get_embedding_variable("spec", DIM, initializer=init).initializer_spec
            table = tf.compat.v1.get_variable("table", initializer=init_rows(spec, vocab, DIM))
            emb = tf.gather(table, idx)
        w = tf.compat.v1.get_variable("w", initializer=np.linspace(-1, 1, DIM, dtype=np.float32)[:, None])
        b = tf.compat.v1.get_variable("b", initializer=np.zeros([1], np.float32))
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=tf.matmul(emb, w) + b))
        module = tfps.train if use_tables else tf.compat.v1.train
        optimizer = opt(module)
        grads_and_vars = optimizer.compute_gradients(loss)
        train = optimizer.apply_gradients(grads_and_vars)
        table_grads = [g for g, v in grads_and_vars if isinstance(v, tfps.embedding.TableShard)]
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            grads = []
            for t in range(STEPS):
                feed = {idx: ids_per_step[t], y: labels[t]}
                got = s.run([train] + [(g.indices, g.values) for g in table_grads], feed)
                grads.append(got[1:])
            rows = s.run(tfps.embedding_lookup(ev, vocab, insert=False)) if use_tables else s.run(table)
            return rows, s.run(w), grads, vocab


ADAM = lambda m: m.AdamOptimizer(0.05, beta1=0.8, beta2=0.95, epsilon=1e-6)  # noqa: E731
FTRL = lambda m: m.FtrlOptimizer(0.3, l1_regularization_strength=0.01, l2_regularization_strength=0.1)  # noqa: E731
FTRL_BETA = lambda m: m.FtrlOptimizer(0.3, l1_regularization_strength=0.01, l2_regularization_strength=0.1,  # noqa: E731
                                      beta=0.5)


@pytest.mark.parametrize("opt", [ADAM, FTRL, FTRL_BETA], ids=["adam", "ftrl", "ftrl_beta"])
def test_all_rows_every_step_match_tf(opt):
    # Every id in every batch: lazy Adam coincides with TF's Adam; Ftrl is per-row anyway.
    ids = [np.arange(V).repeat(2) for _ in range(STEPS)]
    rows, w, _, _ = _model(True, opt, ids)
    ref_rows, ref_w, _, _ = _model(False, opt, ids)
    np.testing.assert_allclose(rows, ref_rows, atol=1e-6)
    np.testing.assert_allclose(w, ref_w, atol=1e-6)


def test_ftrl_rows_skipping_steps_match_tf():
    rng = np.random.default_rng(1)
    ids = [rng.integers(0, V, 5) for _ in range(STEPS)]
    rows, w, _, _ = _model(True, FTRL, ids)
    ref_rows, ref_w, _, _ = _model(False, FTRL, ids)
    np.testing.assert_allclose(rows, ref_rows, atol=1e-6)
    np.testing.assert_allclose(w, ref_w, atol=1e-6)


def test_lazy_adam_matches_numpy_reference():
    rng = np.random.default_rng(2)
    ids = [rng.integers(0, V, 4) for _ in range(STEPS)]   # rows skip steps
    rows, _, grads, vocab = _model(True, ADAM, ids)
    with tf.Graph().as_default():
        spec = tfps.get_embedding_variable("emb", DIM, initializer=tf.compat.v1.random_normal_initializer(
            stddev=0.5, seed=2)).initializer_spec
    ref = {int(k): r.astype(np.float64) for k, r in zip(vocab, init_rows(spec, vocab, DIM))}
    m = {k: np.zeros(DIM) for k in ref}
    v = {k: np.zeros(DIM) for k in ref}
    t = {k: 0 for k in ref}
    b1, b2, eps, lr = 0.8, 0.95, 1e-6, 0.05
    for step in grads:
        (keys, values), = step
        for k, g in zip(keys.tolist(), values.astype(np.float64)):
            t[k] += 1
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            ref[k] = ref[k] - lr * np.sqrt(1 - b2 ** t[k]) / (1 - b1 ** t[k]) * m[k] / (np.sqrt(v[k]) + eps)
    np.testing.assert_allclose(rows, np.stack([ref[int(k)] for k in vocab]), atol=2e-5)
    assert min(t.values()) < STEPS  # some rows really skipped steps


def test_dense_adam_matches_tf_over_20_steps():
    ids = [np.arange(V) for _ in range(STEPS)]
    _, w, _, _ = _model(True, ADAM, ids)
    _, ref_w, _, _ = _model(False, ADAM, ids)
    np.testing.assert_allclose(w, ref_w, atol=1e-6)


def _placed_demo_graph(optimizer):
    from tfps.models.deepfm import deepfm_logits
    g = tf.Graph()
    with g.as_default():
        setter = tf.compat.v1.train.replica_device_setter(
            ps_tasks=4, ps_ops=["VariableV2", "VarHandleOp", "TfpsTableHandle"])
        with tf.compat.v1.device(setter):
            feats = {"dense": tf.zeros([8, 13]), "ids": tf.zeros([8, 26], tf.int64)}
            logits = deepfm_logits(feats, 26, 4, [16, 16, 16])
            loss = tf.reduce_mean(logits)
            optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return g


def test_beta_powers_are_read_on_their_own_ps_only():
    stock = tfps.cluster.cross_device_reads(_placed_demo_graph(tf.compat.v1.train.AdamOptimizer(0.01)))
    ours_graph = _placed_demo_graph(tfps.train.AdamOptimizer(0.01))
    ours = tfps.cluster.cross_device_reads(ours_graph)
    stock_beta = [r for r in stock if "beta" in r.variable and r.op_task.startswith("/job:ps")]
    assert stock_beta, "stock Adam reads its one beta-power pair from the other PS tasks"
    assert not [r for r in ours if "beta" in r.variable]
    pairs = [op.name for op in ours_graph.get_operations() if op.type == "VarHandleOp" and "beta1_power" in op.name]
    ps_with_vars = {op.device for op in ours_graph.get_operations()
                    if op.type == "VarHandleOp" and "beta" not in op.name and "/Adam" not in op.name}
    assert len(pairs) == len(ps_with_vars) > 1


def test_ftrl_rejects_l2_shrinkage():
    with pytest.raises(ValueError, match="l2_shrinkage"):
        tfps.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.1)
