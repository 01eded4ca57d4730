"""Tables in ordinary tf.compat.v1.train.Saver checkpoints: restore gives bit-identical state."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tfps

KEYS = np.array([1, 2, 3, -5, 2**50, np.iinfo(np.int64).min], np.int64)


def _model(num_shards=2, dim=4):
    ev = tfps.get_embedding_variable("emb", dim, num_shards=num_shards,
                                     initializer=tf.compat.v1.random_uniform_initializer(-1, 1, seed=4))
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    w = tf.compat.v1.get_variable("w", [dim, 1], initializer=tf.compat.v1.ones_initializer())
    loss = tf.reduce_sum(tf.square(tf.matmul(tfps.embedding_lookup(ev, ids), w) - 1.0))
    gs = tf.compat.v1.train.get_or_create_global_step()
    train_op = tfps.train.AdagradOptimizer(0.1).minimize(loss, global_step=gs)
    return ev, ids, w, train_op


def _state(sess, ev, w):
    exp = sess.run(ev.export())
    order = np.argsort(exp["keys"])
    return {k: v[order] for k, v in exp.items() if k != "slot_init"}, sess.run(w), exp["slot_init"]


def test_save_restore_identical_lookups_and_next_step(tmp_path):
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for t in range(5):
                s.run(train_op, {ids: KEYS[t % 3:]})
            saver.save(s, prefix)
            saved, saved_w, slot_init = _state(s, ev, w)
            s.run(train_op, {ids: KEYS})
            next_state, next_w, _ = _state(s, ev, w)
    assert len(saved["keys"]) == len(KEYS) and saved["slots"].shape == (len(KEYS), 4)
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            saver.restore(s, prefix)
            restored, restored_w, restored_init = _state(s, ev, w)
            for k in saved:
                np.testing.assert_array_equal(restored[k], saved[k], err_msg=k)
            np.testing.assert_array_equal(restored_w, saved_w)
            np.testing.assert_array_equal(restored_init, slot_init)
            s.run(train_op, {ids: KEYS})
            after, after_w, _ = _state(s, ev, w)
    for k in ("keys", "values", "slots", "freq", "last_step"):
        np.testing.assert_array_equal(after[k], next_state[k], err_msg=k)
    np.testing.assert_array_equal(after_w, next_w)


def test_checkpoint_is_readable_per_feature(tmp_path):
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model(num_shards=2)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(train_op, {ids: KEYS})
            tf.compat.v1.train.Saver().save(s, prefix)
    names = dict(tf.train.list_variables(prefix))
    for shard in (0, 1):
        for part in ("keys", "values", "slots", "freq", "last_step", "slot_init"):
            assert f"emb/shard_{shard}-{part}" in names
    total = sum(names[f"emb/shard_{i}-keys"][0] for i in (0, 1))
    assert total == len(KEYS)


def test_export_load_round_trip_reshards():
    with tf.Graph().as_default():
        src = tfps.get_embedding_variable("src", 3, num_shards=2)
        dst = tfps.get_embedding_variable("dst", 3, num_shards=3, initializer=tf.compat.v1.zeros_initializer())
        look = tfps.embedding_lookup(src, KEYS)
        load = dst.load(src.export())
        with tf.compat.v1.Session() as s:
            want = s.run(look)
            s.run(load)
            np.testing.assert_array_equal(s.run(tfps.embedding_lookup(dst, KEYS, insert=False)), want)
            assert s.run(dst.size()) == len(KEYS)


def test_restore_wrong_dim_is_invalid_argument(tmp_path):
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        _model(dim=4)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(s, prefix)
    with tf.Graph().as_default():
        tfps.get_embedding_variable("emb", 8, num_shards=2)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            with pytest.raises(tf.errors.InvalidArgumentError, match="table has dim 8"):
                saver.restore(s, prefix)


def test_corrupt_tensor_in_checkpoint_is_invalid_argument(tmp_path):
    """A checkpoint whose values tensor is shorter than its keys (truncated) is rejected."""
    prefix = str(tmp_path / "bad")
    with tf.Graph().as_default():
        names = [f"emb/shard_0-{p}" for p in ("keys", "values", "slots", "freq", "last_step", "slot_init")]
        tensors = [tf.constant([1, 2, 3], tf.int64), tf.zeros([2, 4]), tf.zeros([3, 0]),
                   tf.constant([1, 1, 1], tf.int64), tf.constant([0, 0, 0], tf.int64), tf.zeros([0])]
        with tf.compat.v1.Session() as s:
            s.run(tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * 6,
                                    tensors=tensors))
    with tf.Graph().as_default():
        tfps.get_embedding_variable("emb", 4)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"values must be \[3, 4\]"):
                saver.restore(s, prefix)


def test_truncated_checkpoint_file_is_a_clear_error(tmp_path):
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        _model()
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(s, prefix)
    data = [f for f in os.listdir(tmp_path) if ".data-" in f][0]
    with open(tmp_path / data, "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / data) // 2)
    with tf.Graph().as_default():
        _model()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            with pytest.raises((tf.errors.DataLossError, tf.errors.OutOfRangeError,
                                tf.errors.InvalidArgumentError)):
                saver.restore(s, prefix)


def test_ready_op_waits_for_a_table_recreated_empty(tmp_path):
    """A table re-created empty (as on a restarted PS) is reported by the Scaffold's ready_op
    until the init op or a restore runs; the restore brings back every row."""
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model()
        export = ev.export()
        init_variables = tf.compat.v1.global_variables_initializer()
        scaffold = tf.compat.v1.train.Scaffold()
        scaffold.finalize()

        def rows(s):
            exp = s.run(export)
            order = np.argsort(exp["keys"])
            return {k: v[order] for k, v in exp.items() if k != "slot_init"}

        with tf.compat.v1.Session() as s:
            assert {b"emb/shard_0:0", b"emb/shard_1:0"} <= set(s.run(scaffold.ready_op))
            s.run(scaffold.init_op)
            assert s.run(scaffold.ready_op).size == 0
            for t in range(3):
                s.run(train_op, {ids: KEYS[t:]})
            scaffold.saver.save(s, prefix)
            saved = rows(s)
        with tf.compat.v1.Session() as s:   # a fresh session: fresh, empty tables
            s.run(init_variables)           # variables alone do not make the model ready
            assert sorted(s.run(scaffold.ready_op)) == [b"emb/shard_0:0", b"emb/shard_1:0"]
            scaffold.saver.restore(s, prefix)
            assert s.run(scaffold.ready_op).size == 0
            restored = rows(s)
    assert len(saved["keys"]) == len(KEYS)
    for k in saved:
        np.testing.assert_array_equal(restored[k], saved[k], err_msg=k)
