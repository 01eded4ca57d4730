"""Tables in ordinary tf.compat.v1.train.Saver checkpoints: restore gives bit-identical state."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tfps
import tfps.embedding.checkpoint_tools
from tfps.embedding import layout
from tfps.embedding.saveable import MAX_PARTS

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
    return {k: v[order] for k, v in exp.items() if k not in ("slot_init", "admission")}, sess.run(w), exp["slot_init"]


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
    # One part per shard, under the table's name and the part's number, never a device's.
    for p in range(2):
        for column in ("keys", "values", "slots", "freq", "last_step", "admission"):
            assert f"emb-part{p}-{column}" in names
    assert "emb-parts" in names and "emb-slot_init" in names
    assert not [n for n in names if "shard" in n]
    assert names["emb-part0-keys"][0] + names["emb-part1-keys"][0] == len(KEYS)
    assert names["emb-part0-values"][1] == 4
    reader = tf.train.load_checkpoint(prefix)
    assert reader.get_tensor("emb-parts") == 2
    for p in range(2):   # part p holds exactly the keys of shard p
        assert set(reader.get_tensor(f"emb-part{p}-keys").tolist()) == {k for k in KEYS if k % 2 == p}


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
            with pytest.raises(tf.errors.InvalidArgumentError, match="model asks for dim 8"):
                saver.restore(s, prefix)


def test_corrupt_tensor_in_checkpoint_is_invalid_argument(tmp_path):
    """A checkpoint whose values tensor is shorter than its keys (truncated) is rejected."""
    prefix = str(tmp_path / "bad")
    with tf.Graph().as_default():
        columns = ("keys", "values", "slots", "freq", "last_step", "admission")
        names = [f"emb-part0-{c}" for c in columns] + ["emb-parts", "emb-slot_init"]
        tensors = [tf.constant([1, 2, 3], tf.int64), tf.zeros([2, 4]), tf.zeros([3, 0]),
                   tf.constant([1, 1, 1], tf.int64), tf.constant([0, 0, 0], tf.int64), tf.zeros([0], tf.int32),
                   tf.constant(1, tf.int64), tf.zeros([0])]
        for part in range(1, MAX_PARTS):   # the empty stand-ins a checkpoint holds for larger graphs
            names += [f"emb-part{part}-{c}" for c in columns]
            tensors += [tf.zeros([0], tf.int64), tf.zeros([0, 4]), tf.zeros([0, 4]), tf.zeros([0], tf.int64),
                        tf.zeros([0], tf.int64), tf.zeros([0], tf.int32)]
        with tf.compat.v1.Session() as s:
            s.run(tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                                    tensors=tensors))
    with tf.Graph().as_default():
        tfps.get_embedding_variable("emb", 4)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as s:
            with pytest.raises(tf.errors.InvalidArgumentError, match="has parts of inconsistent sizes"):
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
            return {k: v[order] for k, v in exp.items() if k not in ("slot_init", "admission")}

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


@pytest.mark.parametrize("saved_shards,restored_shards", [(3, 2), (2, 3), (1, 4)])
def test_saver_restores_into_another_shard_count_exactly(tmp_path, saved_shards, restored_shards):
    """The shard count is placement: a plain Saver restores N shards into M, every row exact,
    each key in its shard floormod(key, M), and the next step equals the one without re-sharding."""
    prefix = str(tmp_path / "model")
    many = np.concatenate([KEYS, np.arange(-300, 700, dtype=np.int64) * 7919])
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model(num_shards=saved_shards)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for t in range(4):
                s.run(train_op, {ids: many[t:]})
            tf.compat.v1.train.Saver().save(s, prefix)
            saved, saved_w, _ = _state(s, ev, w)
            s.run(train_op, {ids: many})
            after_step, _, _ = _state(s, ev, w)
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model(num_shards=restored_shards)
        shards = [ev.handles[i] for i in range(restored_shards)]
        exports = [tfps.ops.embedding_table.table_export(h)[0] for h in shards]
        with tf.compat.v1.Session() as s:
            tf.compat.v1.train.Saver().restore(s, prefix)
            restored, restored_w, _ = _state(s, ev, w)
            for i, keys in enumerate(s.run(exports)):
                assert len(keys) > 0 and (np.mod(keys, restored_shards) == i).all()
            s.run(train_op, {ids: many})
            resumed, _, _ = _state(s, ev, w)
    assert len(restored["keys"]) == len(many)
    for k in saved:
        np.testing.assert_array_equal(restored[k], saved[k], err_msg=k)
        np.testing.assert_array_equal(resumed[k], after_step[k], err_msg=k)
    np.testing.assert_array_equal(restored_w, saved_w)


def test_import_refuses_keys_of_another_shard():
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("emb", 2, num_shards=2)
        keys = tf.constant([4, 7], tf.int64)       # 7 belongs to shard 1
        imp = tfps.ops.embedding_table.table_import(ev.handles[0], keys, tf.zeros([2, 2]), tf.zeros([2, 0]),
                                                    tf.zeros([2], tf.int64), tf.zeros([2], tf.int64), tf.zeros([0]))
        with tf.compat.v1.Session() as s:
            with pytest.raises(tf.errors.InvalidArgumentError, match="key 7 belongs to shard 1 of 2"):
                s.run(imp)
            assert s.run(ev.size()) == 0


def test_checked_saver_refuses_a_mismatch_before_any_table_changes(tmp_path):
    """Table b has another dim in the checkpoint: the whole restore is refused, naming b, and
    table a keeps its rows (a plain Saver would have restored a, then failed on b)."""
    prefix = str(tmp_path / "model")
    ids = np.arange(10, dtype=np.int64)
    with tf.Graph().as_default():
        a = tfps.get_embedding_variable("a", 4)
        b = tfps.get_embedding_variable("b", 4)
        look = [tfps.embedding_lookup(a, ids), tfps.embedding_lookup(b, ids)]
        with tf.compat.v1.Session() as s:
            s.run(look)
            s.run(a.assign(ids, np.full([10, 4], 7.0, np.float32)))
            tf.compat.v1.train.Saver().save(s, prefix)
    with tf.Graph().as_default():
        a = tfps.get_embedding_variable("a", 4)
        tfps.get_embedding_variable("b", 8)
        fresh = tfps.embedding_lookup(a, ids[:3])
        with tf.compat.v1.Session() as s:
            before = s.run(fresh)
            saver = tfps.embedding.checkpoint_tools.Saver()
            with pytest.raises(ValueError, match="table 'b' has dim 4 there, the model asks for 8"):
                saver.restore(s, prefix)
            np.testing.assert_array_equal(s.run(a.export()["values"]), before)
            assert s.run(a.size()) == 3


def test_plain_saver_restores_every_table_or_none(tmp_path):
    """A plain tf Saver too: the checkpoint has table 'b' of another dim, so the restore fails
    naming it and table 'a' -- restored by the same Saver, listed first -- keeps its rows."""
    prefix = str(tmp_path / "model")
    ids = np.arange(10, dtype=np.int64)
    with tf.Graph().as_default():
        a = tfps.get_embedding_variable("a", 4)
        b = tfps.get_embedding_variable("b", 4)
        with tf.compat.v1.Session() as s:
            s.run([tfps.embedding_lookup(a, ids), tfps.embedding_lookup(b, ids)])
            s.run(a.assign(ids, np.full([10, 4], 7.0, np.float32)))
            tf.compat.v1.train.Saver().save(s, prefix)
    for sharded in (False, True):
        with tf.Graph().as_default():
            a = tfps.get_embedding_variable("a", 4, num_shards=2)
            tfps.get_embedding_variable("b", 8)
            fresh = tfps.embedding_lookup(a, ids[:3])
            with tf.compat.v1.Session() as s:
                before = s.run(fresh)
                with pytest.raises(tf.errors.InvalidArgumentError, match="table 'b' has values of shape"):
                    tf.compat.v1.train.Saver(sharded=sharded).restore(s, prefix)
                assert s.run(a.size()) == 3
                np.testing.assert_array_equal(np.sort(s.run(a.export()["values"]), 0), np.sort(before, 0))


def _saved_model_dir(tmp_path, shards, keys):
    """A checkpoint of `emb` (dim 4, Adagrad slot) over `shards` shards trained on `keys`: (prefix,
    its rows sorted by key)."""
    prefix = str(tmp_path / f"model{shards}")
    with tf.Graph().as_default():
        ev, ids, w, train_op = _model(num_shards=shards)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(train_op, {ids: keys})
            tf.compat.v1.train.Saver().save(s, prefix)
            rows, _, _ = _state(s, ev, w)
    return prefix, rows


def test_restore_reads_parts_in_slices_and_a_damaged_part_changes_no_shard(tmp_path):
    """3 shards into 4 in slices of a few rows, every row exact (oracle: the rows saved); then a
    byte of the checkpoint's data flipped: the restore fails naming the damaged tensor, and no
    shard of the table changed -- not even those whose parts were intact."""
    keys = np.arange(-1500, 1500, dtype=np.int64) * 7919
    prefix, saved = _saved_model_dir(tmp_path, 3, keys)
    with tf.Graph().as_default():
        ev, ids, w, _ = _model(num_shards=4)
        restore = tfps.embedding.checkpoint_tools.restore_table(prefix, ev, slice_bytes=200)   # 4 rows a slice
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(restore)
            restored, _, _ = _state(s, ev, w)
            shards = s.run([tfps.ops.embedding_table.table_export(h)[0] for h in ev.handles])
    for k in saved:
        np.testing.assert_array_equal(restored[k], saved[k], err_msg=k)
    assert [bool((np.mod(k, 4) == i).all()) and len(k) > 0 for i, k in enumerate(shards)] == [True] * 4
    data = prefix + ".data-00000-of-00001"
    blob = bytearray(open(data, "rb").read())
    values = tf.train.load_checkpoint(prefix).get_tensor("emb-part1-values")
    at = bytes(blob).find(values.tobytes()[:64])   # inside part 1's values
    assert at > 0
    blob[at + 8] ^= 0xFF
    open(data, "wb").write(bytes(blob))
    with tf.Graph().as_default():
        ev, ids, w, _ = _model(num_shards=4)
        fill = ev.assign(np.array([7, 8, 9, 10], np.int64), np.full([4, 4], 5.0, np.float32))
        restore = tfps.embedding.checkpoint_tools.restore_table(prefix, ev, slice_bytes=200)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(fill)
            before = s.run(ev.export())
            # The shards' own reads (restore_table: no Saver read first), and a Saver's.
            with pytest.raises(tf.errors.DataLossError, match="emb-part1-values .* is damaged"):
                s.run(restore)
            with pytest.raises(tf.errors.DataLossError):
                tf.compat.v1.train.Saver().restore(s, prefix)
            after = s.run(ev.export())
    for k in ("keys", "values"):
        np.testing.assert_array_equal(np.sort(after[k], axis=0), np.sort(before[k], axis=0), err_msg=k)


def test_a_checkpoint_in_the_layout_before_parts_is_refused_in_one_line_or_restored_by_restore_table(tmp_path):
    """A checkpoint written with one tensor per column for all shards (NAME-keys, ...): the tfps
    Saver refuses it naming the layout, and restore_table reads it as one part, every row exact
    (oracle: the tensors written)."""
    prefix = str(tmp_path / "old")
    keys = np.array([3, -4, 10, 2**40], np.int64)
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    with tf.Graph().as_default():
        names = [f"emb-{c}" for c in ("keys", "values", "slots", "freq", "last_step", "slot_init", "admission")]
        tensors = [tf.constant(keys), tf.constant(values), tf.constant(values + 100), tf.constant([1, 2, 3, 4], tf.int64),
                   tf.constant([5, 6, 7, 8], tf.int64), tf.constant([0.1]), tf.zeros([0], tf.int32)]
        with tf.compat.v1.Session() as s:
            s.run(tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * 7, tensors=tensors))
    with tf.Graph().as_default():
        ev, ids, w, _ = _model(num_shards=3)
        restore = tfps.embedding.checkpoint_tools.restore_table(prefix, ev)
        with tf.compat.v1.Session() as s:
            with pytest.raises(ValueError, match="in the layout before parts") as refused:
                tfps.embedding.checkpoint_tools.Saver().restore(s, prefix)
            assert "\n" not in str(refused.value)
            s.run(restore)
            got = s.run(ev.export())
    order = np.argsort(got["keys"])
    want = np.argsort(keys)
    np.testing.assert_array_equal(got["keys"][order], keys[want])
    np.testing.assert_array_equal(got["values"][order], values[want])
    np.testing.assert_array_equal(got["slots"][order], values[want] + 100)
    np.testing.assert_array_equal(got["freq"][order], np.array([1, 2, 3, 4])[want])


def test_a_column_of_another_dtype_is_refused_and_read_table_reads_every_optimizer(tmp_path):
    """A part whose values were written as float64 (numpy's default) is refused, naming the tensor
    and its dtype, before the table changes; layout.read_table reads an Adam checkpoint (two slots,
    three parts and the empty stand-ins past them) as the table's own export (the oracle)."""
    prefix = str(tmp_path / "adam")
    keys = np.arange(-50, 250, dtype=np.int64) * 31
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("emb", 4, num_shards=3)
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        loss = tf.reduce_sum(tf.square(tfps.embedding_lookup(ev, ids)))
        train = tfps.train.AdamOptimizer(0.1).minimize(loss)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(train, {ids: keys})
            tf.compat.v1.train.Saver().save(s, prefix)
            want = s.run(ev.export())
    got = layout.read_table(tf.train.load_checkpoint(prefix), "emb")
    order, at = np.argsort(want["keys"]), np.argsort(got["keys"])
    for c in ("keys", "values", "slots", "freq", "last_step"):
        np.testing.assert_array_equal(got[c][at], want[c][order], err_msg=c)
    assert want["slots"].shape[1] == 8
    bad = str(tmp_path / "f64")
    reader = tf.train.load_checkpoint(prefix)
    with tf.Graph().as_default():
        names = [n for n in reader.get_variable_to_shape_map()]
        tensors = [tf.constant(reader.get_tensor(n).astype(np.float64) if n == "emb-part1-values"
                               else reader.get_tensor(n)) for n in names]
        with tf.compat.v1.Session() as s:
            s.run(tf.raw_ops.SaveV2(prefix=bad, tensor_names=names, shape_and_slices=[""] * len(names),
                                    tensors=tensors))
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("emb", 4, num_shards=2)
        fill = ev.assign(np.array([1, 2], np.int64), np.ones([2, 4], np.float32))
        restore = tfps.embedding.checkpoint_tools.restore_table(bad, ev)
        with tf.compat.v1.Session() as s:
            s.run(fill)
            with pytest.raises(tf.errors.InvalidArgumentError, match="emb-part1-values of dtype double"):
                s.run(restore)
            assert sorted(s.run(ev.export())["keys"].tolist()) == [1, 2]
