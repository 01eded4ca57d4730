"""Re-sharding on restore, tfps inspect, and checkpoints taken while training."""
import json
import threading

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding.checkpoint_tools import inspect, restore_table

KEYS = np.arange(-50, 250, dtype=np.int64) * 7919


def _export_sorted(s, ev):
    exp = s.run(ev.export())
    order = np.argsort(exp["keys"])
    return {k: v[order] for k, v in exp.items() if k not in ("slot_init", "admission")}


def test_restore_table_under_another_name_reshards(tmp_path):
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("emb", 4, num_shards=2)
        loss = tf.reduce_sum(tf.square(tfps.embedding_lookup(ev, KEYS)))
        train = tfps.train.AdamOptimizer(0.1).minimize(loss)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                s.run(train)
            saved = _export_sorted(s, ev)
            tf.compat.v1.train.Saver().save(s, prefix)
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("renamed", 4, num_shards=3)
        restore = restore_table(str(tmp_path), ev, source_name="emb")
        sizes = [tfps.ops.embedding_table.table_size(h) for h in ev.handles]
        with tf.compat.v1.Session() as s:
            s.run(restore)
            got = _export_sorted(s, ev)
            assert min(s.run(sizes)) > 0
    assert len(got["keys"]) == len(KEYS)
    for k in saved:
        np.testing.assert_array_equal(got[k], saved[k], err_msg=k)
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("other", 4)
        with pytest.raises(ValueError, match="holds no table 'other'"):
            restore_table(str(tmp_path), ev)


def test_inspect_lists_tables_and_top_ids(tmp_path, cli):
    prefix = str(tmp_path / "model")
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("clicks", 2)
        ids = tf.compat.v1.placeholder(tf.int64, [None])
        train = tfps.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tfps.embedding_lookup(ev, ids)))
        with tf.compat.v1.Session() as s:
            for batch in ([1, 2, 3], [1, 2], [1]):
                s.run(train, {ids: batch})
            tf.compat.v1.train.Saver().save(s, prefix)
    (t,) = inspect(str(tmp_path), top=2)
    assert t["table"] == "clicks" and t["rows"] == 3 and t["dim"] == 2
    assert t["top_ids_by_freq"] == [[1, 3], [2, 2]]
    code, out, err = cli("inspect", str(tmp_path))   # the command line, in this process
    assert code == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["tables"][0]["rows"] == 3
    code, _, err = cli("inspect", str(tmp_path / "nope"))
    assert code == 2 and "cannot read checkpoint" in err


def test_inspect_breaks_a_merged_table_down_per_feature(tmp_path, cli):
    """Two features merged in one table; oracle: per feature, its distinct ids (rows) and the
    sum over steps of its distinct ids in each batch (one update per id per step)."""
    from tfps.embedding.merged import Feature, lookup_features
    batches = {"user": ([1, 2, 3, 3], [1, 4], [2]), "item": ([7, 7, 8], [9, 10, 11], [7])}
    features = [Feature(name, 3) for name in batches]
    with tf.Graph().as_default():
        ids = {name: tf.compat.v1.placeholder(tf.int64, [None]) for name in batches}
        rows = lookup_features([(f, ids[f.name]) for f in features])
        loss = tf.add_n([tf.reduce_sum(r) for r in rows])
        train = tfps.train.GradientDescentOptimizer(0.1).minimize(loss)
        with tf.compat.v1.Session() as s:
            for step in range(3):
                s.run(train, {ids[n]: batches[n][step] for n in batches})
            tf.compat.v1.train.Saver().save(s, str(tmp_path / "model"))
    (t,) = inspect(str(tmp_path), feature_names=["user", "item", "unused"])
    assert t["table"].startswith("tfps_merged/") and t["dim"] == 3
    got = {f["feature"]: (f["tag"], f["rows"], f["updates"]) for f in t["features"]}
    want = {f.name: (f.tag, len(set().union(*batches[f.name])), sum(len(set(b)) for b in batches[f.name]))
            for f in features}
    assert got == want
    assert sum(f["rows"] for f in t["features"]) == t["rows"]
    (unnamed,) = inspect(str(tmp_path))   # without names: the tags alone
    assert {(f["tag"], f["feature"]) for f in unnamed["features"]} == {(f.tag, None) for f in features}
    code, out, err = cli("inspect", str(tmp_path))
    assert code == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["tables"][0]["features"] == unnamed["features"]
    code, out, err = cli("inspect", str(tmp_path), "--config", "configs/demo.yaml")   # C1..C26: none of these
    assert code == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["tables"][0]["features"] == unnamed["features"]


def test_checkpoints_taken_while_training_are_consistent(tmp_path):
    """Adagrad with gradient 1 on every row: after t updates a row's accumulator is 0.1 + t and
    its value v0 - lr * sum_k 1/sqrt(0.1 + k). A checkpoint saved while another thread trains
    must hold, for every row, a value and an accumulator from the same moment."""
    lr = 0.01
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("emb", 8, initializer=tf.compat.v1.zeros_initializer())
        train = tfps.train.AdagradOptimizer(lr).minimize(tf.reduce_sum(tfps.embedding_lookup(ev, KEYS)))
        saver = tf.compat.v1.train.Saver(max_to_keep=None)
        with tf.compat.v1.Session() as s:
            s.run(train)
            stop = threading.Event()

            def trainer():
                while not stop.is_set():
                    s.run(train)
            thread = threading.Thread(target=trainer)
            thread.start()
            paths = [saver.save(s, str(tmp_path / "model"), global_step=i) for i in range(15)]
            stop.set()
            thread.join()
    steps_seen = set()
    for path in paths:
        with tf.Graph().as_default():
            ev = tfps.get_embedding_variable("emb", 8)
            with tf.compat.v1.Session() as s:
                tf.compat.v1.train.Saver().restore(s, path)
                exp = s.run(ev.export())
        assert np.isfinite(exp["values"]).all() and np.isfinite(exp["slots"]).all()
        t = np.rint(exp["slots"] - 0.1).astype(int)               # updates per element
        assert (t == t[:, :1]).all()                               # one moment per row
        t = t[:, 0]
        np.testing.assert_array_equal(t, exp["freq"])              # meta from the same moment too
        expected = np.array([-lr * np.sum(1 / np.sqrt(0.1 + np.arange(1, n + 1))) for n in t])
        np.testing.assert_allclose(exp["values"], np.repeat(expected[:, None], 8, 1), rtol=1e-4, atol=1e-5)
        steps_seen |= set(t.tolist())
    assert len(steps_seen) > 3   # the saves really interleaved with training
