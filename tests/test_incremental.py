"""Incremental checkpoints: full + deltas in order restores exactly what a full save holds."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.estimator.incremental import delta_files


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
        inc = tfps.estimator.IncrementalCheckpoints(run_dir, every_steps=2, printer=lambda *a, **k: None)
        saver_hook = tf.compat.v1.train.CheckpointSaverHook(run_dir, save_steps=10, listeners=[inc.listener])
        evict = tfps.estimator.EvictionHook(3, printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[saver_hook, evict, inc]) as s:
            for _ in range(22):
                s.run(train)
            final = _sorted(s.run(export))
        assert evict.evicted > 0 and inc.deltas_written >= 3
    # No delta at 10 and 20: a full checkpoint was written there first.
    assert [step for step, _ in delta_files(run_dir)] == [2, 4, 6, 8, 12, 14, 16, 18, 22]
    # The job "dies" after the delta of step 22 and before its full save: the latest full
    # checkpoint is step 20, restored, then the delta of step 22 on top.
    tf.compat.v1.train.update_checkpoint_state(run_dir, os.path.join(run_dir, "model.ckpt-20"))
    with tf.Graph().as_default():
        ev, train, export, w = _build()
        restore = tfps.estimator.DeltaRestoreHook(run_dir, printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[restore], checkpoint_dir=run_dir) as s:
            got = _sorted(s.run(export))
        assert restore.applied == [22]
    for k in final:
        np.testing.assert_array_equal(got[k], final[k], err_msg=k)


def test_bad_arguments():
    with pytest.raises(ValueError, match="exactly one of"):
        tfps.estimator.IncrementalCheckpoints("/tmp/x")
    with pytest.raises(ValueError, match="must be > 0"):
        tfps.estimator.IncrementalCheckpoints("/tmp/x", every_steps=0)
