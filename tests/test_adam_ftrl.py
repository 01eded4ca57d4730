"""tfps Adam and Ftrl against tf.compat.v1.train (dense and all-rows-present tables) and a numpy
lazy-Adam reference (tables with rows that skip steps); beta powers per PS device, saved under
one name whatever the PS count."""
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.models.common import dense_layer
from initializer_reference import init_rows
from tfps.state import manifest
from tfps.state.saver import StateSaver

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


def _placed_demo_graph(optimizer, ps_tasks=4):
    from tfps.models.deepfm import deepfm_logits
    g = tf.Graph()
    with g.as_default():
        setter = tf.compat.v1.train.replica_device_setter(
            ps_tasks=ps_tasks, ps_ops=["VariableV2", "VarHandleOp", "TfpsTableHandle"])
        with tf.compat.v1.device(setter if ps_tasks else None):
            feats = {"dense": tf.zeros([8, 13]), "ids": tf.zeros([8, 26], tf.int64)}
            logits = deepfm_logits(feats, 26, 4, [16, 16, 16])
            loss = tf.reduce_mean(logits)
            train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    return g, train_op


def _ops_run_by(op):
    """Every op a session.run of `op` runs (its inputs and control inputs, transitively)."""
    seen, stack = set(), [op]
    while stack:
        op = stack.pop()
        if op.name not in seen:
            seen.add(op.name)
            stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return seen


def test_beta_powers_are_read_on_their_own_ps_only():
    stock = tfps.cluster.cross_device_reads(_placed_demo_graph(tf.compat.v1.train.AdamOptimizer(0.01))[0])
    ours_graph, train_op = _placed_demo_graph(tfps.train.AdamOptimizer(0.01))
    ours = tfps.cluster.cross_device_reads(ours_graph)
    stock_beta = [r for r in stock if "beta" in r.variable and r.op_task.startswith("/job:ps")]
    assert stock_beta, "stock Adam reads its one beta-power pair from the other PS tasks"
    step = _ops_run_by(train_op)
    assert not [r for r in ours if "beta" in r.variable and r.op in step]
    # The copies read the saved pair once, when the local init sets them (after a restore too).
    with ours_graph.as_default():
        local_init = {name for v in tf.compat.v1.local_variables() for name in _ops_run_by(v.initializer)}
        saved = {v.op.name for v in tf.compat.v1.global_variables() if "beta" in v.op.name}
    assert {r.op for r in ours if "beta" in r.variable} <= local_init
    assert saved == {"beta1_power", "beta2_power"}
    pairs = [op.name for op in ours_graph.get_operations() if op.type == "VarHandleOp" and "beta1_power" in op.name]
    ps_with_vars = {op.device for op in ours_graph.get_operations()
                    if op.type == "VarHandleOp" and "beta" not in op.name and "/Adam" not in op.name}
    assert len(pairs) == len(ps_with_vars) > 1


def _saved_names(graph):
    """The tensor names the runners' Saver (tfps.state.StateSaver, sharded, as
    runner.with_checked_saver builds it) writes into a checkpoint of `graph`."""
    with graph.as_default():
        StateSaver(sharded=True).build()
    return sorted(name.decode() for op in graph.get_operations() if op.type == "SaveV2"
                  for name in tf.make_ndarray(op.inputs[1].op.get_attr("value")))


def test_checkpoint_names_are_the_same_for_1_2_and_3_ps():
    names = {}
    for ps in (0, 1, 2, 3):
        graph, _ = _placed_demo_graph(tfps.train.AdamOptimizer(0.01), ps_tasks=ps)
        names[ps] = _saved_names(graph)
        with graph.as_default():   # one pair per PS that holds dense variables, all but one local
            copies = [v for v in tf.compat.v1.local_variables() if "beta1_power" in v.op.name]
        assert len(copies) == max(ps - 1, 0), (ps, copies)
    assert names[0] == names[1] == names[2] == names[3]
    # and so is the fingerprint of the model (tfps.state.manifest: its dense variables by name)
    one, three = (manifest.describe(_placed_demo_graph(tfps.train.AdamOptimizer(0.01), ps_tasks=ps)[0])
                  for ps in (0, 3))
    assert manifest.fingerprint(one) == manifest.fingerprint(three)
    assert [n for n in names[3] if "power" in n] == ["beta1_power", "beta2_power"]


def test_ftrl_rejects_l2_shrinkage():
    with pytest.raises(ValueError, match="l2_shrinkage"):
        tfps.train.FtrlOptimizer(0.1, l2_shrinkage_regularization_strength=0.1)


# Resume on another placement: an Adam model trained on 2 PS resumes on 3 PS (one of which is
# killed and restarted on the way) and in one process, through MonitoredTrainingSession with the
# runners' Saver (tfps.state.StateSaver, which checks the model's fingerprint first). Oracle: the
# same steps run uninterrupted in one process (the batch of a step is a function of the global
# step, so a restore to an earlier step replays the same batches).
B, VOCAB = 16, 40
ADAM_BETAS = (0.8, 0.95)


def _ps_server(forker, spec, index, tmp):
    """PS task `index` of spec, as `tfps launch` runs one (`tfps train` under a TF_CONFIG: a
    tf.distribute.Server that joins), forked by `forker`: no TensorFlow import of its own."""
    return forker.start(["train", "--config", "configs/demo.yaml", "--set", f"model_dir={tmp}"], f"{tmp}/ps{index}.out",
                        env={"TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": "ps", "index": index}}),
                             "TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.fixture(scope="module")
def three_ps(forker, tmp_path_factory):
    """(cluster spec, the in-process chief's server, the 3 PS processes, their log directory): PS
    tasks are processes of their own, so that one can be killed and started again on its address."""
    from tfps.cluster.launch import cluster_spec
    spec = cluster_spec(3, 1)
    tmp = str(tmp_path_factory.mktemp("three_ps"))
    ps = [_ps_server(forker, spec, i, tmp) for i in range(3)]
    config = tf.compat.v1.ConfigProto()
    config.experimental.disable_thread_spinning = True
    chief = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name="chief", task_index=0, config=config)
    yield spec, chief, ps, tmp
    for p in ps:
        p.kill()


def _batch(step):
    rng = np.random.default_rng(step)
    return rng.integers(0, VOCAB, [B, 3]), rng.normal(size=[B, 4]), rng.integers(0, 2, [B, 1])


class _Model:
    """Table + two dense layers trained by tfps Adam; ps_tasks 0: one process."""

    def __init__(self, ps_tasks):
        self.graph = tf.Graph()
        with self.graph.as_default():
            setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=ps_tasks, ps_device="/job:ps", worker_device="/job:chief/task:0",
                ps_ops=["VariableV2", "VarHandleOp", "TfpsTableHandle"])
            with tf.compat.v1.device(setter if ps_tasks else None):
                self.gs = tf.compat.v1.train.get_or_create_global_step()
                self.ids = tf.compat.v1.placeholder(tf.int64, [B, 3])
                self.x = tf.compat.v1.placeholder(tf.float32, [B, 4])
                self.y = tf.compat.v1.placeholder(tf.float32, [B, 1])
                ev = tfps.get_embedding_variable("e", 4, num_shards=2)
                rows = tf.reshape(tfps.embedding_lookup(ev, self.ids), [B, 12])
                h = dense_layer(tf.concat([rows, self.x], 1), 8, "h", activation=tf.nn.relu,
                                kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1))
                logit = dense_layer(h, 1, "out", kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=2))
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=self.y, logits=logit))
                optimizer = tfps.train.AdamOptimizer(0.05, beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1], epsilon=1e-6)
                self.train_op = optimizer.minimize(loss, global_step=self.gs)
                self.rows = tfps.embedding_lookup(ev, np.arange(VOCAB), insert=False)
            self.dense = {v.op.name: v for v in tf.compat.v1.trainable_variables()}
            # every (beta1_power, beta2_power): the saved pair first, then the local copies
            self.pairs = [optimizer.beta_powers(v) for v in self.dense.values()]
            self.pairs = sorted(set(self.pairs), key=lambda p: p[0] not in tf.compat.v1.global_variables())
            self.devices = {v.device for v in self.dense.values()}

    def session(self, target, checkpoint_dir):
        with self.graph.as_default():
            scaffold = tf.compat.v1.train.Scaffold(saver=StateSaver(sharded=True))
            return tf.compat.v1.train.MonitoredTrainingSession(
                master=target, is_chief=True, checkpoint_dir=str(checkpoint_dir), scaffold=scaffold,
                save_checkpoint_steps=10**6, save_summaries_steps=None, save_summaries_secs=None,
                log_step_count_steps=None)

    def train_to(self, s, last_step):
        """Trains until the global step is last_step; each run's batch is that of its step."""
        while True:
            step = s.run(self.gs)
            if step >= last_step:
                return
            ids, x, y = _batch(step)
            s.run(self.train_op, {self.ids: ids, self.x: x, self.y: y})

    def state(self, s):
        return {**s.run(self.dense), "rows": s.run(self.rows), "pairs": s.run(self.pairs)}


def _assert_same_model(got, want):
    for name in want:
        if name != "pairs":
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for pair in got["pairs"]:   # the saved pair and every copy hold the uninterrupted run's
        np.testing.assert_allclose(pair, want["pairs"][0], rtol=1e-6)


N, M = 6, 5


def _uninterrupted(tmp_path):
    """The one-process run's state after N + 2 and after N + M steps."""
    model = _Model(0)
    with model.session("", tmp_path / "uninterrupted") as s:
        model.train_to(s, N + 2)
        early = model.state(s)
        model.train_to(s, N + M)
        return early, model.state(s)


@pytest.mark.compat   # a cluster resume, also on the other TensorFlow line in CI
def test_adam_trained_on_2_ps_resumes_on_3_ps_and_in_one_process(tmp_path, three_ps, forker):
    spec, chief, ps, ps_dir = three_ps
    early, want = _uninterrupted(tmp_path)
    run = tmp_path / "run"
    model = _Model(2)
    assert len(model.devices) == 2 and len(model.pairs) == 2
    tf.compat.v1.Session.reset(chief.target)   # PS tasks start empty
    with model.session(chief.target, run) as s:
        model.train_to(s, N)                    # the session saves step N when it ends
    checkpoint = tf.train.latest_checkpoint(str(run))
    assert checkpoint.endswith(f"-{N}")
    names = dict(tf.train.list_variables(checkpoint))
    assert [n for n in names if "power" in n] == ["beta1_power", "beta2_power"]

    # In one process, from a copy of the 2-PS model_dir.
    shutil.copytree(run, tmp_path / "one")
    model = _Model(0)
    with model.session("", tmp_path / "one") as s:
        assert s.run(model.gs) == N
        model.train_to(s, N + M)
        _assert_same_model(model.state(s), want)

    # On 3 PS from the same checkpoint, then a PS that holds only copies is killed and comes back.
    model = _Model(3)
    assert len(model.devices) == 3 and len(model.pairs) == 3
    tf.compat.v1.Session.reset(chief.target)
    with model.session(chief.target, run) as s:
        assert s.run(model.gs) == N
        model.train_to(s, N + 2)
        _assert_same_model(model.state(s), early)
        index = tf.DeviceSpec.from_string(model.pairs[1][0].device).task
        assert index != tf.DeviceSpec.from_string(model.pairs[0][0].device).task
        ps[index].kill()   # (returns once it is gone)
        ps[index] = _ps_server(forker, spec, index, ps_dir)
        # The next run that reaches it fails; the session is re-created: the chief restores step
        # N and the local init sets the copies on every PS from the restored pair.
        s.run(list(model.dense.values()))
        assert s.run(model.gs) == N
        restored = [tf.train.load_variable(checkpoint, n) for n in ("beta1_power", "beta2_power")]
        for pair in s.run(model.pairs):
            np.testing.assert_array_equal(pair, restored)
        model.train_to(s, N + M)
        _assert_same_model(model.state(s), want)
