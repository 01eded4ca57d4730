"""tfps.embedding.stock: the initial rows and feature tags in stock ops against tfps's own ops (a
missing key read from a tfps table, TfpsFeatureTag), a stock table's lookup, and the stock
delta and load ops of `tfps serve --follow` against a numpy model of the table."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding import stock
from tfps.embedding.variable import embedding_variables
from tfps.ops.unique_partition_ops import feature_tag

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
KEYS = np.concatenate([np.array([0, 1, -1, 7, I64_MIN + 2, I64_MAX, 2**48, 2**48 - 1, -2**47], np.int64),
                       np.random.default_rng(0).integers(I64_MIN, I64_MAX, 501, dtype=np.int64)])


@pytest.mark.parametrize("initializer", [
    None, tf.compat.v1.truncated_normal_initializer(mean=0.1, stddev=0.3, seed=5),
    tf.compat.v1.random_normal_initializer(stddev=2.0, seed=11), tf.compat.v1.random_uniform_initializer(-0.5, 0.25),
    tf.compat.v1.constant_initializer(0.75), tf.compat.v1.zeros_initializer()])
def test_init_rows_in_stock_ops_equal_the_tables_missing_rows(graph, initializer):
    ev = tfps.get_embedding_variable("emb", 33, initializer=initializer)
    table = ev.lookup(KEYS, insert=False)
    stocked = stock.init_rows(ev.initializer_spec, tf.constant(KEYS), ev.dim)
    with tf.compat.v1.Session() as s:
        want, got = s.run([table, stocked])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert np.abs(got - want).max() <= 1e-6 * max(1.0, np.abs(want).max())


def test_feature_tag_in_stock_ops_equals_tfps_feature_tag(graph):
    ids = KEYS.reshape(-1, 3)
    with tf.compat.v1.Session() as s:
        for tags in (5, [1, 32767, 4242]):
            want, got = s.run([feature_tag(ids, tags), stock.feature_tag(tf.constant(ids), tags)])
            np.testing.assert_array_equal(got, want)


def _stock_table(session, keys, rows, dim=4):
    """A stock table of (keys, rows) in the default graph, filled as a SavedModel's main op does."""
    table = stock.StockTable("t", dim, ("uniform", -1.0, 1.0, 3))
    session.run([table.keys.assign(keys), table.values.assign(np.concatenate([np.zeros([1, dim]), rows]))])
    session.run(table.fill_index())
    return table


def test_a_stock_table_reads_its_rows_and_the_initializer_for_other_keys(graph):
    keys = np.array([3, -9, 2**50], np.int64)
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    with tf.compat.v1.Session() as s:
        table = _stock_table(s, keys, rows)
        ask = np.array([2**50, 5, 3, stock.EMPTY_KEY, stock.DELETED_KEY, -9], np.int64)
        got = s.run(table.lookup(tf.constant(ask)))
        fresh = s.run(stock.init_rows(table.initializer_spec, tf.constant(ask), 4))
    np.testing.assert_array_equal(got[[0, 2, 5]], rows[[2, 0, 1]])
    np.testing.assert_array_equal(got[[1, 3, 4]], fresh[[1, 3, 4]])


@pytest.mark.parametrize("rows", [0, 1, 7, 1000])
def test_an_index_sized_for_its_rows_filled_in_slices_reads_every_row_and_never_grows(graph, rows):
    """index_buckets: the smallest power of two that holds `rows` under DenseHashTable's load
    factor; filled 3 keys per step (slices that do not divide the rows), every key reads its row
    and the bucket count is what it was made with."""
    buckets = stock.index_buckets(rows)
    assert buckets & (buckets - 1) == 0 and buckets * 0.8 >= rows and (buckets // 2 * 0.8 < rows or buckets == 8)
    dim = 2
    keys = np.random.default_rng(rows).choice(2**40, rows, replace=False).astype(np.int64)
    values = np.random.default_rng(1).standard_normal([rows, dim]).astype(np.float32)
    table = stock.StockTable("t", dim, ("zeros", 0.0, 0.0, 0), rows=rows)
    with tf.compat.v1.Session() as s:
        s.run([table.keys.assign(keys), table.values.assign(np.concatenate([np.zeros([1, dim], np.float32), values]))])
        s.run(table.fill_index(slice_rows=3))
        size, got = s.run([table.index.size(), table.lookup(tf.constant(keys))])
        exported_keys, _ = s.run(table.index.export())
    assert size == rows and len(exported_keys) == buckets   # export lists every bucket: none was added
    np.testing.assert_array_equal(got, values)


def test_stock_delta_and_load_ops_against_numpy(graph):
    """apply_delta removes, overwrites and appends; load replaces everything; a delta holding a
    reserved key is refused before anything changes. Oracle: a dict of key -> row."""
    keys = np.array([1, 2, 3], np.int64)
    rows = np.ones([3, 4], np.float32) * np.arange(1, 4, dtype=np.float32)[:, None]
    with tf.compat.v1.Session() as s:
        table = _stock_table(s, keys, rows)
        attached = stock.attached_stock_tables(tf.compat.v1.get_default_graph())
        assert [(t.name, t.dim) for t in attached] == [("t", 4)]
        t = attached[0]
        ph = {"keys": tf.compat.v1.placeholder(tf.int64), "values": tf.compat.v1.placeholder(tf.float32),
              "removed": tf.compat.v1.placeholder(tf.int64)}
        delta, load = t.apply_delta(ph), t.load(ph)
        ask = tf.constant(np.arange(0, 8, dtype=np.int64))
        read = table.lookup(ask)
        fresh = s.run(stock.init_rows(table.initializer_spec, ask, 4))
        model = dict(zip(keys.tolist(), rows))

        def check():
            np.testing.assert_array_equal(s.run(read), [model.get(k, fresh[k]) for k in range(8)])
        s.run(delta, {ph["keys"]: [3, 5, 6], ph["values"]: np.full([3, 4], 7.0) + np.arange(3)[:, None],
                      ph["removed"]: [1]})
        model.pop(1)
        model.update({3: np.full(4, 7.0), 5: np.full(4, 8.0), 6: np.full(4, 9.0)})
        check()
        with pytest.raises(tf.errors.InvalidArgumentError, match="cannot hold keys"):
            s.run(delta, {ph["keys"]: [2, stock.EMPTY_KEY], ph["values"]: np.zeros([2, 4]), ph["removed"]: [5]})
        check()
        s.run(load, {ph["keys"]: [7, 2], ph["values"]: np.full([2, 4], -1.0), ph["removed"]: []})
        model = {7: np.full(4, -1.0), 2: np.full(4, -1.0)}
        check()


def test_a_stock_graph_builds_no_tfps_op(graph):
    stock.use_stock_tables(graph)
    ev = tfps.get_embedding_variable("emb", 4)
    out = ev.lookup(tf.constant([1, 2], tf.int64), insert=False)
    assert ev.stock is stock.stock_tables(graph)["emb"] and embedding_variables(graph) == [ev]
    assert out.shape.as_list() == [2, 4]
    assert not [op.type for op in graph.get_operations() if op.type.startswith("Tfps")]
    with pytest.raises(ValueError, match="stock table"):
        ev.lookup(tf.constant([1], tf.int64), insert=True)
