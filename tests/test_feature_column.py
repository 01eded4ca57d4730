"""tfps feature columns against TF's own input_layer and a numpy combination of table rows."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding.merged import lookup_features

FC = tfps.feature_column


def _features():
    return {"a": tf.SparseTensor([[0, 0], [0, 1], [2, 0], [3, 0], [3, 2]],
                                 tf.constant([5, -3, 5, 2**50, 7], tf.int64), [5, 3]),
            "b": tf.constant([[4, -1], [-1, -1], [8, 4], [1, 1], [2, -1]], tf.int64),
            "s": tf.constant([["x"], ["y"], [""], ["x"], ["z"]])}


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_columns_match_tf_input_layer_and_numpy(graph, combiner):
    cols = [FC.embedding_column(FC.categorical_column_with_embedding("a"), 4, combiner=combiner),
            FC.embedding_column(FC.categorical_column_with_embedding("b"), 4, combiner=combiner),
            FC.embedding_column(FC.categorical_column_with_embedding("s", dtype=tf.string), 4, combiner=combiner)]
    feats = _features()
    ours = FC.input_layer(feats, cols)
    theirs = tf.compat.v1.feature_column.input_layer(feats, cols)
    # Oracle: the rows of each id, read from the tables, combined in numpy.
    a_rows = lookup_features([(cols[0].feature, tf.constant([5, -3, 2**50, 7], tf.int64))], insert=False)[0]
    b_rows = lookup_features([(cols[1].feature, tf.constant([4, 8, 1, 2], tf.int64))], insert=False)[0]
    with tf.compat.v1.Session() as s:
        x, y = s.run([ours, theirs])
        a, b = s.run([a_rows, b_rows])
    assert x.shape == (5, 12)
    np.testing.assert_allclose(x, y, atol=1e-6)
    comb = {"sum": lambda r: r.sum(0), "mean": lambda r: r.mean(0),
            "sqrtn": lambda r: r.sum(0) / np.sqrt(len(r))}[combiner]
    row = dict(zip([5, -3, 2**50, 7], a))
    want_a = np.stack([comb(np.stack([row[5], row[-3]])), np.zeros(4), comb(row[5][None]),
                       comb(np.stack([row[2**50], row[7]])), np.zeros(4)])
    np.testing.assert_allclose(x[:, :4], want_a, rtol=1e-5, atol=1e-6)   # sorted by name: a, b, s
    rb = dict(zip([4, 8, 1, 2], b))
    want_b = np.stack([comb(rb[4][None]), np.zeros(4), comb(np.stack([rb[8], rb[4]])),
                       comb(np.stack([rb[1], rb[1]])), comb(rb[2][None])])
    np.testing.assert_allclose(x[:, 4:8], want_b, rtol=1e-5, atol=1e-6)
    assert np.all(x[2, 8:] == 0)   # '' is ignored like -1


def test_one_merged_table_for_alike_columns(graph):
    cols = [FC.embedding_column(FC.categorical_column_with_embedding(k), 4) for k in ("a", "b")]
    cols.append(FC.embedding_column(FC.categorical_column_with_embedding(
        "c", options=tfps.EmbeddingOptions(merge=False)), 4))
    cols.append(FC.embedding_column(FC.categorical_column_with_embedding("d"), 8))
    feats = {k: tf.constant([[1]], tf.int64) for k in "abcd"}
    FC.input_layer(feats, cols)
    names = sorted(ev.name for ev in tfps.embedding_variables())
    assert len(names) == 3 and "tfps_features/c" in names


def test_trains_in_an_estimator_style_model_fn(graph):
    cols = [FC.embedding_column(FC.categorical_column_with_embedding(k), 4) for k in ("a", "b")]
    feats = _features()
    net = FC.input_layer(feats, cols[:1] + [cols[1]])
    loss = tf.reduce_sum(tf.square(net - 1.0))
    train = tfps.train.AdagradOptimizer(0.5).minimize(loss)
    with tf.compat.v1.Session() as s:
        before = s.run(loss)
        for _ in range(30):
            s.run(train)
        assert s.run(loss) < 0.5 * before


def test_bad_columns(graph):
    with pytest.raises(ValueError, match="dtype must be"):
        FC.categorical_column_with_embedding("a", dtype=tf.float32)
    with pytest.raises(ValueError, match="combiner must be"):
        FC.embedding_column(FC.categorical_column_with_embedding("a"), 4, combiner="max")
    with pytest.raises(ValueError, match="dimension must be a positive int"):
        FC.embedding_column(FC.categorical_column_with_embedding("a"), 0)
    with pytest.raises(ValueError, match="options must be tfps.EmbeddingOptions"):
        FC.categorical_column_with_embedding("a", options={"merge": False})
    with pytest.raises(ValueError, match="num_shards must be an int in"):
        tfps.EmbeddingOptions(num_shards=0)
    with pytest.raises(ValueError, match="is not in the features dict"):
        FC.input_layer({}, [FC.embedding_column(FC.categorical_column_with_embedding("a"), 4)])
