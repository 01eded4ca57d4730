"""tfps.runner.CheckpointSaverHook against tf.compat.v1.train.CheckpointSaverHook: the same
checkpoints, without a session.run of its own on the steps where no save is due; and the
runners' estimators saving through it."""
import types

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.training import basic_session_run_hooks, training_util

import tfps
from tfps.runner import CheckpointSaverHook


def _count_reads(hook, reads):
    """Wraps hook.after_run so that each session.run it makes of the global step read is counted
    (a save runs the saver's ops as well: those are not counted)."""
    original = hook.after_run

    def after_run(run_context, run_values):
        session, run = run_context.session, run_context.session.run

        def counted(fetches, *args, **kwargs):
            reads.append(fetches is hook._global_step_tensor)
            return run(fetches, *args, **kwargs)
        session.run = counted
        try:
            return original(run_context, run_values)
        finally:
            session.run = run
    hook.after_run = after_run


def _saved_steps(model_dir):
    state = tf.train.get_checkpoint_state(model_dir)
    return sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)


def _train(model_dir, hook_class, steps, every_steps=None, every_secs=None, clock=None):
    """Trains a counter `steps` steps under MonitoredSession with the given saver hook class (its
    increment after the global step read, as tfps's optimizers and TF's own increment order it);
    `clock[0]` (when given) is the hooks' time, one second per step. Returns (the checkpoint steps
    written, how many times the hook ran a read of the global step)."""
    graph, reads = tf.Graph(), []
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [], initializer=tf.zeros_initializer())
        with tf.control_dependencies([training_util._get_or_create_global_step_read()]):
            train_op = tf.group(w.assign_add(1.0), tf.compat.v1.assign_add(step, 1))
        scaffold = tf.compat.v1.train.Scaffold(saver=tf.compat.v1.train.Saver(max_to_keep=100))
        hook = hook_class(model_dir, save_steps=every_steps, save_secs=every_secs, scaffold=scaffold)
        _count_reads(hook, reads)
        creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold)
        with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=[hook]) as sess:
            for _ in range(steps):
                sess.run(train_op)
                if clock is not None:
                    clock[0] += 1.0
    return _saved_steps(model_dir), sum(reads)


def test_saves_the_steps_tf_saves_without_a_run_per_step(tmp_path):
    want, tf_reads = _train(str(tmp_path / "tf"), tf.compat.v1.train.CheckpointSaverHook, 23, every_steps=5)
    got, our_reads = _train(str(tmp_path / "tfps"), CheckpointSaverHook, 23, every_steps=5)
    assert got == want and want == [0, 5, 10, 15, 20, 23]
    assert tf_reads >= 23           # TF's hook reads the global step after every step
    assert our_reads == 4           # ours only when a save is due (steps 5, 10, 15, 20)


def test_time_based_saves_come_when_tfs_do(tmp_path, monkeypatch):
    runs = {}
    for name, hook_class in (("tf", tf.compat.v1.train.CheckpointSaverHook), ("tfps", CheckpointSaverHook)):
        clock = [1000.0]
        monkeypatch.setattr(basic_session_run_hooks, "time", types.SimpleNamespace(time=lambda: clock[0]))
        runs[name] = _train(str(tmp_path / name), hook_class, 17, every_secs=4, clock=clock)
    assert runs["tfps"][0] == runs["tf"][0]
    assert len(runs["tf"][0]) >= 4  # saves by time happened in the middle of the run


@pytest.mark.estimator
def test_the_runners_estimators_save_through_it(tmp_path, monkeypatch):
    from tfps.estimator.runner import with_checked_saver
    # A model_fn with a tfps table and optimizer, wrapped as the runners wrap theirs: checkpoints
    # at the configured steps, and the global step read only when a save is due.
    reads, used = [], []

    def counting_begin(self):
        used.append(self)
        _count_reads(self, reads)
        return original_begin(self)
    original_begin = CheckpointSaverHook.begin
    monkeypatch.setattr(CheckpointSaverHook, "begin", counting_begin)

    def model_fn(features, labels, mode, params):
        ev = tfps.get_embedding_variable("e", 4)
        w = tf.compat.v1.get_variable("w", [4, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(tfps.embedding_lookup(ev, features), w)[:, 0] - labels))
        train_op = tfps.train.AdagradOptimizer(0.1).minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    def input_fn():
        ids = np.arange(64, dtype=np.int64) % 7
        return tf.data.Dataset.from_tensor_slices((ids, np.ones(64, np.float32))).batch(4).repeat()
    config = tf.estimator.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=5, keep_checkpoint_max=100)
    est = tf.estimator.Estimator(with_checked_saver(model_fn, 100), config=config)
    est.train(input_fn, max_steps=12)
    assert len(used) == 1
    assert _saved_steps(str(tmp_path)) == [0, 5, 10, 12]
    assert sum(reads) == 2          # at 5 and 10: a tfps train op increments after the fetched read


def _graph_events(paths):
    return sum(bool(e.graph_def or e.meta_graph_def) for p in paths for e in tf.compat.v1.train.summary_iterator(str(p)))


def _start(model_dir, extra=None, **kwargs):
    """One session start under tfps's saver hook over a small graph (`extra`: one more variable)."""
    with tf.Graph().as_default():
        gs = tf.compat.v1.train.get_or_create_global_step()
        tf.compat.v1.get_variable("w", [3])
        if extra:
            tf.compat.v1.get_variable(extra, [2])
        step = tf.compat.v1.assign_add(gs, 1)
        hook = CheckpointSaverHook(model_dir, save_steps=100, **kwargs)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[hook], checkpoint_dir=model_dir) as s:
            s.run(step)
    tf.compat.v1.summary.FileWriterCache.clear()


def test_the_graph_is_written_at_the_first_start_and_with_save_graph_def_only(tmp_path):
    """Oracle: graph.pbtxt parsed back holds the graph's variables; the events read back hold it
    (for TensorBoard) with or without the text."""
    from google.protobuf import text_format
    _start(str(tmp_path))
    nodes = {n.name for n in text_format.Parse((tmp_path / "graph.pbtxt").read_text(), tf.compat.v1.GraphDef()).node}
    assert {"w", "global_step"} <= nodes
    assert _saved_steps(str(tmp_path)) == [0, 1]   # the start saves the step it starts at, as TF's
    assert _graph_events(tmp_path.glob("events.out.tfevents.*")) > 0
    other = tmp_path / "no_text"
    _start(str(other), save_graph_def=False)
    assert not (other / "graph.pbtxt").exists() and _graph_events(other.glob("events.out.tfevents.*")) > 0


@pytest.mark.slow
def test_a_restarted_trainer_does_not_write_its_graph_again(tmp_path, forker):
    """Three `tfps train` runs on one model_dir (each a fresh process, as a restart is): the second
    leaves graph.pbtxt as the first wrote it (TF's hook rewrote it, ~1 CPU-s a start); with
    graph.pbtxt removed, the third writes it again, the same text. Every run's events hold the
    graph (TensorBoard's)."""
    import os
    pbtxt = tmp_path / "graph.pbtxt"
    args = ["train", "--config", "configs/demo.yaml", "--set", "train.batch_size=16", "--set", "eval.examples=16",
            "--set", "model.hidden_units=[4]", "--set", f"model_dir={tmp_path}"]
    first = None
    for steps, rewritten in ((1, True), (2, False), (3, True)):
        before = pbtxt.stat().st_mtime_ns if pbtxt.exists() else None
        seen = {p: len(list(tf.compat.v1.train.summary_iterator(str(p)))) for p in tmp_path.glob("events.out.tfevents.*")}
        out = forker.run(args + ["--set", f"train.steps={steps}"], tmp_path.parent / f"{tmp_path.name}.{steps}",
                         timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert (pbtxt.stat().st_mtime_ns != before) == rewritten, steps
        first = first or pbtxt.read_text()
        assert pbtxt.read_text() == first
        # the events this run wrote (a writer of the same second as the last appends to its file)
        graphs = sum(bool(e.graph_def) for p in tmp_path.glob("events.out.tfevents.*")
                     for e in list(tf.compat.v1.train.summary_iterator(str(p)))[seen.get(p, 0):])
        assert graphs > 0, steps
        if steps == 2:
            os.unlink(pbtxt)
