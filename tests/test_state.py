"""tfps.state: manifests and fingerprints, the lease of a model_dir, a partitioned variable cut
whole, the StateSaver in a graph of one's own, and a trainer going on from the live state after
a kill (resuming after kill -9 at random moments: test_resume.py)."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding.checkpoint_tools import checkpoint_tables
from tfps.embedding import layout
from tfps.state import deltas, lease as leases
from tfps.state import manifest as manifests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model(num_shards=1, hidden=4, lr=0.1):
    ev = tfps.get_embedding_variable("emb", 4, num_shards=num_shards)
    gs = tf.compat.v1.train.get_or_create_global_step()
    ids = tf.constant([1, 2, 3], tf.int64)
    w = tf.compat.v1.get_variable("w", [4, hidden])
    loss = tf.reduce_sum(tf.matmul(tfps.embedding_lookup(ev, ids), w))
    return tfps.train.AdagradOptimizer(lr).minimize(loss, global_step=gs)


def _description(**kwargs):
    with tf.Graph().as_default() as g:
        _model(**kwargs)
        return manifests.describe(g)


def test_the_fingerprint_is_the_models_not_its_placement():
    one, three = _description(num_shards=1), _description(num_shards=3)
    assert manifests.fingerprint(one) == manifests.fingerprint(three)
    assert manifests.difference(one, three) is None
    assert set(one["dense"]) == {"global_step", "w", "w/Adagrad"}
    assert json.loads(one["optimizer"][0])["class"] == "AdagradOptimizer"


def test_a_difference_is_named():
    base = _description()
    wider, faster = _description(hidden=5), _description(lr=0.2)
    assert manifests.fingerprint(wider) != manifests.fingerprint(base)
    assert manifests.difference(base, wider) == "variable 'w': float32 [4, 4] saved, float32 [4, 5] in the model"
    assert manifests.difference(base, faster).startswith("optimizer:")
    # Export and evaluation graphs have no optimizer: only what they hold must match.
    with tf.Graph().as_default() as g:
        tfps.get_embedding_variable("emb", 4)
        tf.compat.v1.get_variable("w", [4, 4])
        predict = manifests.describe(g)
    assert manifests.difference(base, predict, exact=False) is None
    assert manifests.difference(base, predict, exact=True) is not None
    saved = json.loads(manifests.manifest(base, "full"))
    with pytest.raises(manifests.StateMismatch, match="variable 'w'"):
        manifests.check(saved, wider, "checkpoint x")


def test_a_model_moves_between_the_tensorflow_lines():
    """TF 2.21's optimizers have an attribute 2.15's lack (use_own_namescope_for_non_slot_vars):
    not a hyper-parameter, it is in no record, and a record saved with it (by 2.21 before) matches
    one without it, so a model_dir trained on one line resumes on the other; a real
    hyper-parameter still differs."""
    base = _description()
    (record,) = base["optimizer"]
    assert "use_own_namescope_for_non_slot_vars" not in json.loads(record)
    saved_on_2_21 = dict(base, optimizer=[json.dumps({**json.loads(record), "use_own_namescope_for_non_slot_vars": False},
                                                     sort_keys=True)])
    assert manifests.difference(saved_on_2_21, base) is None
    assert manifests.difference(saved_on_2_21, _description(lr=0.2)).startswith("optimizer:")


def _hold_lease(model_dir):
    code = ("import sys, time; from tfps.state.lease import Lease; l = Lease(sys.argv[1]); "
            "print('held', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, model_dir], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout.readline().strip() == "held"
    return p


def test_one_writer_per_model_dir_and_a_dead_holder_frees_it(tmp_path):
    holder = _hold_lease(str(tmp_path))
    try:
        with pytest.raises(leases.LeaseHeld, match=f"pid {holder.pid} "):
            leases.Lease(str(tmp_path))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with leases.Lease(str(tmp_path)) as lease:   # kill -9 released it
        assert lease.holder["pid"] == os.getpid()
    leases.Lease(str(tmp_path)).release()       # and release() does


def test_a_second_trainer_on_a_model_dir_is_refused(tmp_path, forker):
    holder = _hold_lease(str(tmp_path))
    try:
        r = forker.run(["train", "--config", "configs/demo.yaml", "--set", f"model_dir={tmp_path}",
                        "--set", "train.steps=10"], f"{tmp_path}.second", timeout=300)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert r.returncode == 2, r.stderr   # refused (a crash would be 1 or a signal)
    assert not tf.train.latest_checkpoint(str(tmp_path))   # it wrote nothing


def _updates(model_dir):
    """{table: (keys, update counts)} of the final checkpoint, sorted by key."""
    path = tf.train.latest_checkpoint(model_dir)
    reader = tf.train.load_checkpoint(path)
    out = {}
    for table in checkpoint_tables(path):
        rows = layout.read_table(reader, table, ("keys", "freq"))
        keys, freq = rows["keys"], rows["freq"]
        order = np.argsort(keys)
        out[table] = (keys[order], freq[order])
    return out, int(reader.get_tensor("global_step"))


class _NoFinalSave(tf.compat.v1.train.CheckpointSaverHook):
    def end(self, session):   # the job dies after its last delta: the newest cut is a delta
        pass


def _partitioned(parts):
    """A model with a dense variable in `parts` partitions and a table; (train op, whole variable)."""
    gs = tf.compat.v1.train.get_or_create_global_step()
    ev = tfps.get_embedding_variable("emb", 4)
    w = tf.compat.v1.get_variable("w", [6, 4], partitioner=tf.compat.v1.fixed_size_partitioner(parts),
                                  initializer=tf.compat.v1.random_normal_initializer(seed=1))
    x = tfps.embedding_lookup(ev, tf.constant([1, 2, 3], tf.int64))
    loss = tf.reduce_sum(tf.matmul(tf.matmul(x, tf.transpose(w.as_tensor())), w.as_tensor()))
    return tfps.train.AdagradOptimizer(0.1).minimize(loss, global_step=gs), w.as_tensor()


def test_a_partitioned_variable_is_described_and_cut_whole_whatever_its_partitions(tmp_path):
    """The fingerprint of a model does not change with a dense variable's partition count, and a
    delta of 2 partitions restores into 3 (oracle: the value the 2-partition session had)."""
    from tfps.runner.incremental import DeltaRestoreHook, IncrementalCheckpoints
    with tf.Graph().as_default() as g:
        train, whole = _partitioned(2)
        two = manifests.describe(g)
        inc = IncrementalCheckpoints(str(tmp_path), every_steps=3, printer=lambda *a, **k: None)
        saver_hook = _NoFinalSave(str(tmp_path), save_steps=1000, listeners=[inc.listener])
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[saver_hook, inc]) as s:
            for _ in range(6):
                s.run(train)
            want = s.raw_session().run(whole)
    assert deltas.latest_cut(str(tmp_path))[2] == 6
    with tf.Graph().as_default() as g:
        train, whole = _partitioned(3)
        assert manifests.fingerprint(manifests.describe(g)) == manifests.fingerprint(two)
        assert two["dense"]["w"]["shape"] == [6, 4]
        restore = DeltaRestoreHook(str(tmp_path), printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[restore], checkpoint_dir=str(tmp_path)) as s:
            got = s.raw_session().run(whole)
            step = s.raw_session().run(tf.compat.v1.train.get_global_step())
    assert restore.applied == [3, 6] and step == 6
    np.testing.assert_array_equal(got, want)


def test_a_state_saver_builds_itself_on_first_save_in_a_graph_of_ones_own(tmp_path):
    """saver.save with no build() first (the README's own-graph flow); oracle: a fresh graph's
    StateSaver restores the same rows, dense values and step, and the checkpoint has a manifest."""
    def graph():
        train, ids = _model(), tf.constant([1, 2, 3], tf.int64)
        with tf.compat.v1.variable_scope("", reuse=True):
            ev, w = tfps.get_embedding_variable("emb", 4), tf.compat.v1.get_variable("w")
        return train, [tfps.embedding_lookup(ev, ids, insert=False), w.read_value(),
                       tf.compat.v1.train.get_global_step().read_value()]

    with tf.Graph().as_default():
        train, read = graph()
        saver = tfps.state.StateSaver()
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                s.run(train)
            want = s.run(read)
            path = saver.save(s, str(tmp_path / "model.ckpt"), global_step=tf.compat.v1.train.get_global_step())
    assert manifests.read(path) is not None
    with tf.Graph().as_default():
        _, read = graph()
        saver = tfps.state.StateSaver()
        with tf.compat.v1.Session() as s:
            saver.restore(s, path)
            got = s.run(read)
    assert got[2] == want[2] == 3
    for a, b in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(a, b)


class _Killed(Exception):
    """What a kill -9 of a trainer leaves: its session gone with no clean end."""


class _HalfStepThenKilled(tf.compat.v1.train.SessionRunHook):
    """After `after` steps of this session, one more step lands its updates (the train op's
    inputs) and not its global-step increment (the train op), then the trainer dies."""

    def __init__(self, after):
        self._after, self._steps = after, 0

    def begin(self):
        (train_op,) = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAIN_OP)
        assert train_op.type == "AssignAddVariableOp", train_op.type   # the increment, after the updates
        # what it waits on: its control inputs, and its inputs' (the constant 1, made among them)
        self._updates = [c for op in [train_op] + [t.op for t in train_op.inputs] for c in op.control_inputs]
        assert any("Adagrad" in op.type for op in self._updates), self._updates   # the table updates

    def after_run(self, run_context, run_values):
        self._steps += 1
        if self._steps == self._after:
            run_context.session.run(self._updates)
            raise _Killed()


def _every_batch_model_fn(features, labels, mode, params):
    """Each batch holds id 7 (with 3 others): its update count is the number of steps trained."""
    from tfps.models.spec import ModelSpec
    emb = tfps.get_embedding_variable("ids", embedding_dim=4)
    logits = tf.reduce_sum(tfps.embedding_lookup(emb, features["ids"]), [1, 2])
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    gs = tf.compat.v1.train.get_or_create_global_step()
    return ModelSpec(mode, loss=loss, train_op=tfps.train.AdagradOptimizer(0.1).minimize(loss, global_step=gs))


def _every_batch_input_fn():
    ids = tf.data.Dataset.range(10**6).map(lambda i: tf.stack([tf.constant(7, tf.int64), i % 3 + 10]))
    return tf.data.Dataset.zip(({"ids": ids}, ids.map(lambda i: tf.cast(i[1] % 2, tf.float32)))).batch(8)


@pytest.mark.compat
@pytest.mark.parametrize("runner", ["tfps", pytest.param("estimator", marks=pytest.mark.estimator)])
def test_a_trainer_going_on_from_the_live_state_after_a_kill_counts_its_half_applied_step(tmp_path, runner,
                                                                                         monkeypatch):
    """In-process servers (a PS, a chief, a worker): each trainer trains, and then dies after a
    step that landed its table updates and not its global-step increment (the window a kill -9
    can hit). Its next session goes on from the live state on the PS -- the worker's as a
    restarted worker does, the chief's finding the model whole -- and counts that step. A session
    after a clean end counts nothing. Oracle: id 7 is in every batch, so its update count equals
    the global step exactly; without the count it would be one ahead after each kill. On tfps's
    runner and on tf.estimator (TF_CONFIG)."""
    from tfps.cluster.placement import replica_device_setter
    from tfps.cluster.ports import cluster_spec
    from tfps.runner import train
    from tfps.runner.graph import RunSettings
    spec = tf.train.ClusterSpec(cluster_spec(1, 2))
    servers = {job: tf.distribute.Server(spec, job_name=job, task_index=0) for job in ("ps", "chief", "worker")}

    def run(job, max_steps, kill_after=None, trainers=2, rank=None):
        hooks = [_HalfStepThenKilled(kill_after)] if kill_after else []
        device_fn = replica_device_setter(cluster=spec, worker_device=f"/job:{job}/task:0")
        try:
            if runner == "tfps":
                settings = RunSettings(str(tmp_path), save_checkpoints_steps=1000, master=servers[job].target,
                                       is_chief=job == "chief", num_worker_replicas=trainers,
                                       trainer_rank=int(job == "worker") if rank is None else rank,
                                       device_fn=device_fn)
                train(_every_batch_model_fn, {}, _every_batch_input_fn, settings, max_steps, hooks=hooks)
            else:
                from tfps.estimator.runner import with_checked_saver
                monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": spec.as_dict(),
                                                            "task": {"type": job, "index": 0}}))
                config = tf.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=1000)
                assert config.master == servers[job].target
                config = config.replace(device_fn=replica_device_setter(   # as docs/training.md says
                    cluster=config.cluster_spec, worker_device=f"/job:{config.task_type}/task:{config.task_id}"))
                tf.estimator.Estimator(with_checked_saver(_every_batch_model_fn, 5), config=config).train(
                    _every_batch_input_fn, hooks=hooks, max_steps=max_steps)
        except _Killed:
            assert kill_after
        else:
            assert not kill_after

    def counted(path=None):   # (updates of id 7, global step) of a checkpoint (the latest)
        path = path or tf.train.latest_checkpoint(str(tmp_path))
        reader = tf.train.load_checkpoint(path)
        (table,) = checkpoint_tables(path)
        rows = layout.read_table(reader, table, ("keys", "freq"))
        keys, freq = rows["keys"], rows["freq"]
        return int(freq[keys == 7].sum()), int(reader.get_tensor("global_step"))

    def every_checkpoint():
        return [counted(p) for p in tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths]

    if runner == "estimator":   # tf.estimator's own device function would keep the tables off the PS
        from tfps.estimator.runner import with_checked_saver
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": spec.as_dict(), "task": {"type": "chief", "index": 0}}))
        with pytest.raises(ValueError, match="not on a PS task.*replica_device_setter"):
            tf.estimator.Estimator(with_checked_saver(_every_batch_model_fn, 5), config=tf.estimator.RunConfig(
                model_dir=str(tmp_path))).train(_every_batch_input_fn, max_steps=10)
        assert not os.listdir(tmp_path)
    run("chief", 10)                  # ends cleanly, saving at 10
    run("worker", 40, kill_after=3)   # 13, and the updates of a 14th
    run("worker", 40)                 # counts it: 14; then to 32 (tfps's runner stops a worker 4 x 2 steps early)
    run("chief", 60, kill_after=2)    # after a clean end: counts nothing (its first save: 32 or so); 2 steps
                                      # and the updates of a 3rd
    run("chief", 70)                  # finds the model whole, counts it before its first save; saves at 70
    saved = every_checkpoint()        # 0 and 10, the chief's two session starts, and 70
    assert len(saved) == 5 and all(f == step for f, step in saved), saved
    # The state on the PS lost (as a PS restart loses it) after a worker's half step: the chief
    # restores the cut at 70, adding one step for the other trainer's (in_flight), and the
    # restore clears the worker's mark, so that its next session counts nothing more.
    run("worker", 80, kill_after=2)
    tf.compat.v1.Session.reset(servers["ps"].target)
    run("chief", 80)                  # 70 + 1, then 9 steps: id 7's 79 updates at step 80
    run("worker", 90)
    run("chief", 100)
    assert counted() == (99, 100)
    if runner == "tfps":   # a job started again with more trainers on the live PS tasks: a rank of its own
        run("worker", 120, trainers=3, rank=2)
        run("chief", 120, trainers=3)
        assert counted() == (119, 120)
