"""Table merging: merged and unmerged features look up and train identically; tags keep
features apart; stage-2 dedup; export by feature name."""
import zlib

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding.merged import Feature, export_feature, lookup_features, physical_table
from tfps.ops.unique_partition_ops import MAX_TAG, feature_tag

DIM, B, F, STEPS = 4, 32, 3, 20


def _train(merge, num_shards=1):
    """20 Adagrad steps of a 3-feature model; returns per-feature {id: row} and the dense weights."""
    rng = np.random.default_rng(3)
    ids_np = rng.integers(0, 40, (STEPS, B, F)).astype(np.int64)
    ids_np[:, :, 2] -= 20          # negative ids take the hashed (non-exact) tag path
    labels = rng.integers(0, 2, (STEPS, B, 1)).astype(np.float32)
    with tf.Graph().as_default():
        ids = tf.compat.v1.placeholder(tf.int64, [B, F])
        y = tf.compat.v1.placeholder(tf.float32, [B, 1])
        opts = tfps.EmbeddingOptions(merge=merge, num_shards=num_shards)
        feats = [Feature(f"f{f}", DIM, tf.compat.v1.random_normal_initializer(stddev=0.3), options=opts)
                 for f in range(F)]
        rows = lookup_features([(feat, ids[:, f]) for f, feat in enumerate(feats)])
        w = tf.compat.v1.get_variable("w", initializer=np.linspace(-1, 1, F * DIM, dtype=np.float32)[:, None])
        logits = tf.matmul(tf.concat(rows, 1), w)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        train = tfps.train.AdagradOptimizer(0.2).minimize(loss)
        exports = [export_feature(feat) for feat in feats]
        tables = {physical_table(feat)[0].name for feat in feats}
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            first = s.run(rows, {ids: ids_np[0]})
            for t in range(STEPS):
                s.run(train, {ids: ids_np[t], y: labels[t]})
            out = [dict(zip(e["ids"].tolist(), map(tuple, e["values"].tolist()))) for e in s.run(exports)]
            return first, out, s.run(w), tables


@pytest.mark.parametrize("num_shards", [1, 3])
def test_merged_and_unmerged_train_identically(num_shards):
    first_m, rows_m, w_m, tables_m = _train(merge=True, num_shards=num_shards)
    first_u, rows_u, w_u, tables_u = _train(merge=False, num_shards=num_shards)
    assert len(tables_m) == 1 and len(tables_u) == F
    for a, b in zip(first_m, first_u):
        np.testing.assert_array_equal(a, b)
    for f in range(2):  # features with exact (in-range) ids: same ids, same rows
        assert rows_m[f].keys() == rows_u[f].keys()
        for k in rows_m[f]:
            np.testing.assert_allclose(rows_m[f][k], rows_u[f][k], atol=1e-6)
    np.testing.assert_allclose(w_m, w_u, atol=1e-6)
    # Training moved the rows: the comparison is not between two untouched tables.
    assert max(np.abs(np.array(rows_m[0][k]) - first_m[0][0]).max() for k in rows_m[0]) > 1e-3


def test_tags_keep_features_apart(graph):
    ids = tf.constant([0, 7, 2**48 - 1, 2**48, -5, np.iinfo(np.int64).min], tf.int64)
    a, b = feature_tag(ids, 1), feature_tag(ids, 2)
    with tf.compat.v1.Session() as s:
        ka, kb = s.run([a, b])
    assert not set(ka) & set(kb)
    np.testing.assert_array_equal(ka[:3] & ((1 << 48) - 1), [0, 7, 2**48 - 1])   # exact in range
    assert len(set(ka)) == len(ka)
    with pytest.raises(ValueError, match="tag must be in"):
        feature_tag(ids, 0)


def test_colliding_tags_are_refused_in_any_order(graph):
    seen = {}
    for i in range(10000):   # find two names with the same 15-bit tag
        name = f"feat{i}"
        tag = zlib.crc32(name.encode()) % MAX_TAG + 1
        if tag in seen:
            pair = (seen[tag], name)
            break
        seen[tag] = name
    fa, fb = Feature(pair[0], 4), Feature(pair[1], 4)
    assert fa.tag == fb.tag
    for first, second in ((fa, fb), (fb, fa)):
        with tf.Graph().as_default():
            ta, _ = physical_table(first)
            assert physical_table(first)[0] is ta      # stable on repeated asks
            with pytest.raises(ValueError, match=f"same 15-bit tag {fa.tag}"):
                physical_table(second)
            own = Feature(second.name, 4, options=tfps.EmbeddingOptions(merge=False))
            assert physical_table(own)[0] is not ta


def test_stage_two_dedups_columns_sharing_ids(graph):
    cat = tfps.feature_column.categorical_column_with_embedding("item")
    cols = [tfps.feature_column.embedding_column(cat, 4, combiner=c) for c in ("mean", "sum")]
    other = tfps.feature_column.embedding_column(tfps.feature_column.categorical_column_with_embedding("user"), 4)
    feats = {"item": tf.constant([[1, 2], [2, 3]], tf.int64), "user": tf.constant([[1], [9]], tf.int64)}
    stats = {}
    out = tfps.feature_column.input_layer(feats, cols + [other], stats=stats)
    with tf.compat.v1.Session() as s:
        s.run(out)
        st = s.run(stats)
    # item: 3 distinct ids, looked up by two columns; user: 2. Stage 2 probes item's ids once.
    assert st == {"ids_stage1": 3 + 3 + 2, "ids_stage2": 3 + 2}


def test_export_feature_round_trip(graph):
    feat = Feature("clicks", 3, tf.compat.v1.zeros_initializer())
    other = Feature("views", 3, tf.compat.v1.zeros_initializer())
    rows = lookup_features([(feat, tf.constant([5, 2**40, 5], tf.int64)), (other, tf.constant([5], tf.int64))])
    exp = export_feature(feat)
    with tf.compat.v1.Session() as s:
        s.run(rows)
        got = s.run(exp)
    assert sorted(got["ids"].tolist()) == [5, 2**40]
    assert got["values"].shape == (2, 3)


def test_table_name_is_placement_and_policy_free():
    """A merged table keeps its checkpoint name whatever the shard count or eviction and
    admission rules of its features; features of one table that disagree on them are refused."""
    def name(options):
        with tf.Graph().as_default():
            return physical_table(Feature("C1", 4, options=options))[0].name
    base = name(tfps.EmbeddingOptions())
    assert name(tfps.EmbeddingOptions(num_shards=3)) == base
    assert name(tfps.EmbeddingOptions(evict_after_steps=10, admit_min_count=2)) == base
    with tf.Graph().as_default():
        physical_table(Feature("C1", 4))
        with pytest.raises(ValueError, match="share its options"):
            physical_table(Feature("C2", 4, options=tfps.EmbeddingOptions(evict_min_freq=2)))
        with pytest.raises(ValueError, match="share its options"):
            physical_table(Feature("C3", 4, options=tfps.EmbeddingOptions(num_shards=2)))
