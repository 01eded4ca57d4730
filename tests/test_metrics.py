"""tfps.metrics against brute-force definitions on hand-made and random scores."""
import itertools

import numpy as np
import pytest

from tfps.metrics import auc, gauc, logloss


def _pairwise_auc(labels, scores):
    """P(score of a positive > score of a negative), ties one half, by counting every pair."""
    pos = [s for s, l in zip(scores, labels) if l]
    neg = [s for s, l in zip(scores, labels) if not l]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_gauc_weights_users_by_impressions_and_skips_one_class_users():
    users = ["a", "a", "a", "b", "b", "c", "c", "c", "c"]
    labels = [1, 0, 0, 1, 1, 0, 1, 1, 0]                 # user b has one class: left out
    scores = [0.9, 0.1, 0.95, 0.3, 0.2, 0.5, 0.5, 0.8, 0.1]
    a = _pairwise_auc(labels[:3], scores[:3])            # 0.5
    c = _pairwise_auc(labels[5:], scores[5:])            # (1 + 1 + 0.5 + 1) / 4 = 0.875
    assert gauc(users, labels, scores) == pytest.approx((3 * a + 4 * c) / 7)


def test_against_brute_force_on_random_data():
    rng = np.random.default_rng(0)
    users = rng.integers(0, 20, 400)
    labels = rng.random(400) < 0.3
    scores = np.round(rng.random(400), 2)                # ties
    assert auc(labels, scores) == pytest.approx(_pairwise_auc(labels, scores))
    want = num = 0.0
    for u in np.unique(users):
        m = users == u
        if 0 < labels[m].sum() < m.sum():
            want += m.sum() * _pairwise_auc(labels[m], scores[m])
            num += m.sum()
    assert gauc(users, labels, scores) == pytest.approx(want / num)


def test_logloss_and_bad_inputs():
    assert logloss([1, 0], [0.8, 0.4]) == pytest.approx(-(np.log(0.8) + np.log(0.6)) / 2)
    assert np.isfinite(logloss([1, 0], [0.0, 1.0]))      # clipped, not infinite
    with pytest.raises(ValueError, match="no user has both classes"):
        gauc([1, 1, 2], [1, 1, 0], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="differ in length"):
        gauc([1, 2], [1], [0.5, 0.5])


def test_streaming_metrics_over_batches_equal_the_whole_set_and_reset(graph):
    import tensorflow as tf
    from tfps.metrics import streaming_metrics, streaming_sum
    rng = np.random.default_rng(1)
    users, labels, scores = rng.integers(0, 30, 1000), (rng.random(1000) < 0.4).astype(np.float32), rng.random(1000)
    u, l, s = (tf.compat.v1.placeholder(d, [None]) for d in (tf.int64, tf.float32, tf.float32))
    ops = streaming_metrics(l, s, u)
    ops["bad"] = streaming_sum(u)
    reset = tf.compat.v1.local_variables_initializer()
    with tf.compat.v1.Session() as sess:
        for _ in range(2):                     # a second evaluation starts from nothing
            sess.run(reset)
            for b in range(0, 1000, 300):
                sess.run([op[1] for op in ops.values()], {u: users[b:b + 300], l: labels[b:b + 300],
                                                           s: scores[b:b + 300]})
            got = sess.run({k: op[0] for k, op in ops.items()})
            assert got["auc"] == pytest.approx(_pairwise_auc(labels, scores), abs=1e-6)
            assert got["gauc"] == pytest.approx(gauc(users, labels, scores), abs=1e-6)
            assert got["logloss"] == pytest.approx(logloss(labels, scores), rel=1e-5)
            assert got["bad"] == users.sum()
        sess.run(reset)
        sess.run(ops["auc"][1], {u: [1, 2], l: [1.0, 1.0], s: [0.5, 0.6]})
        assert np.isnan(sess.run(ops["auc"][0]))          # one class: undefined, not an exception
