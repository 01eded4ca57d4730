"""Incremental checkpoints: full + deltas in order restores exactly what a full save holds."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.runner.incremental import delta_files


def _build(num_shards=2):
    opts = tfps.EmbeddingOptions(num_shards=num_shards, evict_after_steps=6)
    ev = tfps.get_embedding_variable("emb", 4, options=opts, num_shards=num_shards)
    gs = tf.compat.v1.train.get_or_create_global_step()
    step = tf.cast(gs, tf.int64)
    # Ids churn: each step sees a window that moves by 7, so rows get evicted along the way.
    ids = tf.range(30, dtype=tf.int64) + step * 7
    w = tf.compat.v1.get_variable("w", [4, 1])
    loss = tf.reduce_sum(tf.square(tf.matmul(tfps.embedding_lookup(ev, ids), w) - 1.0))
    train = tfps.train.AdamOptimizer(0.05).minimize(loss, global_step=gs)
    return ev, train, ev.export(), w


def _sorted(exp):
    order = np.argsort(exp["keys"])
    return {k: v[order] for k, v in exp.items() if k not in ("slot_init", "admission")}


def test_full_plus_deltas_equals_full(tmp_path):
    run_dir = str(tmp_path / "run")
    with tf.Graph().as_default():
        ev, train, export, w = _build()
        inc = tfps.runner.IncrementalCheckpoints(run_dir, every_steps=2, printer=lambda *a, **k: None)
        saver_hook = tf.compat.v1.train.CheckpointSaverHook(run_dir, save_steps=10, listeners=[inc.listener])
        evict = tfps.runner.EvictionHook(3, printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[saver_hook, evict, inc]) as s:
            for _ in range(22):
                s.run(train)
            final = _sorted(s.run(export))
        assert evict.evicted > 0 and inc.deltas_written >= 3
    # Deltas every 2 steps, none at 10 and 20 (a full checkpoint); each full checkpoint deleted
    # the deltas the one before it covers (the final save at 22 those up to 20).
    assert inc.deltas_written == 9
    assert [step for step, _ in delta_files(run_dir)] == [22]
    # The job "dies" after the delta of step 22 and before its full save: the latest full
    # checkpoint is step 20, restored, then the delta of step 22 on top.
    tf.compat.v1.train.update_checkpoint_state(run_dir, os.path.join(run_dir, "model.ckpt-20"))
    with tf.Graph().as_default():
        ev, train, export, w = _build()
        restore = tfps.runner.DeltaRestoreHook(run_dir, printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[restore], checkpoint_dir=run_dir) as s:
            got = _sorted(s.run(export))
        assert restore.applied == [22]
    for k in final:
        np.testing.assert_array_equal(got[k], final[k], err_msg=k)


def test_bad_arguments():
    with pytest.raises(ValueError, match="exactly one of"):
        tfps.runner.IncrementalCheckpoints("/tmp/x")
    with pytest.raises(ValueError, match="must be > 0"):
        tfps.runner.IncrementalCheckpoints("/tmp/x", every_steps=0)


class _DiesBeforeItsLastSave(tf.compat.v1.train.CheckpointSaverHook):
    def end(self, session):
        pass


def _train_with_deltas(run_dir, num_shards, steps, save_steps=10, every_steps=2):
    """Trains to global step `steps` with full checkpoints every save_steps and deltas every
    every_steps, and dies before a final full save; returns the final rows (sorted)."""
    with tf.Graph().as_default():
        ev, train, export, w = _build(num_shards)
        inc = tfps.runner.IncrementalCheckpoints(run_dir, every_steps=every_steps, printer=lambda *a, **k: None)
        saver_hook = _DiesBeforeItsLastSave(run_dir, save_steps=save_steps, listeners=[inc.listener])
        evict = tfps.runner.EvictionHook(3, printer=lambda *a, **k: None)
        restore = tfps.runner.DeltaRestoreHook(run_dir, printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[restore, saver_hook, evict, inc],
                                                         checkpoint_dir=run_dir) as s:
            while s.run(tf.compat.v1.train.get_global_step()) < steps:
                s.run(train)
            return _sorted(s.run(export))


def _restore(run_dir, num_shards):
    """(rows after restoring full + deltas, applied steps), or the ValueError raised."""
    with tf.Graph().as_default():
        ev, train, export, w = _build(num_shards)
        restore = tfps.runner.DeltaRestoreHook(run_dir, printer=lambda *a, **k: None)
        restore.begin()
        with tf.compat.v1.Session() as s:
            tf.compat.v1.train.Saver().restore(s, tf.train.latest_checkpoint(run_dir))
            before = _sorted(s.run(export))
            try:
                restore.after_create_session(s, None)
            except ValueError as e:
                after = _sorted(s.run(export))
                for k in before:
                    np.testing.assert_array_equal(after[k], before[k], err_msg=k)   # nothing applied
                return e, None
            return _sorted(s.run(export)), restore.applied


def _equal(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_deltas_restore_into_another_shard_count(tmp_path):
    run_dir = str(tmp_path)
    final = _train_with_deltas(run_dir, num_shards=2, steps=16)
    got, applied = _restore(run_dir, num_shards=3)      # full checkpoint of step 10, deltas 12, 14, 16
    assert applied == [12, 14, 16]
    _equal(got, final)


def test_a_missing_delta_is_refused_and_nothing_is_applied(tmp_path):
    run_dir = str(tmp_path)
    _train_with_deltas(run_dir, num_shards=2, steps=18)   # full at 10; deltas 12, 14, 16, 18
    assert [s for s, _ in delta_files(run_dir, after_step=10)] == [12, 14, 16, 18]
    for path in (tmp_path.glob("delta-14.*")):
        path.unlink()
    err, _ = _restore(run_dir, num_shards=2)
    assert isinstance(err, ValueError) and "delta-16 continues from step 14" in str(err)


def test_a_resumed_session_continues_from_the_newest_delta(tmp_path):
    """A job restored from the full checkpoint of step 10 plus its deltas resumes at step 16 (the
    newest delta's global step and dense state), saves a full checkpoint there, trains on and
    dies at 18: the next restore is that checkpoint plus delta 18, and nothing of the old chain
    is lost (evicted rows stay evicted)."""
    run_dir = str(tmp_path)
    _train_with_deltas(run_dir, num_shards=2, steps=16, save_steps=10)   # full at 10; deltas 12, 14, 16
    final = _train_with_deltas(run_dir, num_shards=2, steps=18, save_steps=10)
    assert tf.train.latest_checkpoint(run_dir).endswith("model.ckpt-16")
    got, applied = _restore(run_dir, num_shards=2)
    assert applied == [18]
    _equal(got, final)


def test_removed_keys_past_the_log_bound_make_a_complete_delta(tmp_path):
    """More removals than the log keeps (64 x 65536): the delta holds every row instead, and
    restoring it replaces the table -- the removed keys do not come back."""
    run_dir = str(tmp_path)
    with tf.Graph().as_default():
        ev, train, export, w = _build(num_shards=1)
        gs = tf.compat.v1.train.get_global_step()
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        insert = ev.lookup(keys)
        remove = ev.remove(keys)
        step = tf.compat.v1.assign_add(gs, 1)
        stats = ev.memory_stats()
        inc = tfps.runner.IncrementalCheckpoints(run_dir, every_steps=1, printer=lambda *a, **k: None)
        inc.begin()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(insert, {keys: np.arange(1000)})
            saver.save(s, os.path.join(run_dir, "model.ckpt"), global_step=0)
            inc.after_create_session(s, None)
            for start in range(1000, 4_601_000, 1_200_000):
                batch = np.arange(start, min(start + 1_200_000, 4_601_000))
                s.run(insert, {keys: batch})
                s.run(remove, {keys: batch})
            s.run(remove, {keys: np.arange(500)})
            assert s.run(stats["removed_logged"]) <= 64 * 65536
            s.run(step)
            inc.write_delta(s, 1)
            want = _sorted(s.run(export))
    assert len(want["keys"]) == 500
    reader = tf.train.load_checkpoint(os.path.join(run_dir, "delta-1"))
    parts = int(reader.get_tensor("emb-delta-parts"))
    assert all(reader.get_tensor(f"emb-delta-part{p}-complete") for p in range(parts))
    # Complete: every part holds its shard's rows and no removals; the parts hold every row.
    assert sum(reader.get_tensor(f"emb-delta-part{p}-removed").size for p in range(parts)) == 0
    assert sum(reader.get_tensor(f"emb-delta-part{p}-keys").size for p in range(parts)) == 500
    got, applied = _restore(run_dir, num_shards=3)
    assert applied == [1]
    _equal(got, want)
