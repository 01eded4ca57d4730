"""The synthetic generator and the exact AUC against brute-force oracles."""
import numpy as np

from tfps.data import SyntheticConfig, SyntheticCriteo, auc


def test_auc_matches_pairwise_count():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = np.round(rng.random(300), 2)  # ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert abs(auc(labels, scores) - pairs / (len(pos) * len(neg))) < 1e-12


def test_batches_are_deterministic_and_shaped():
    gen = SyntheticCriteo(SyntheticConfig(seed=3))
    d1, i1, y1, p1 = gen.batch(5, 4000)
    d2, i2, y2, p2 = SyntheticCriteo(SyntheticConfig(seed=3)).batch(5, 4000)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(y1, y2)
    assert d1.shape == (4000, 13) and i1.shape == (4000, 26) and i1.dtype == np.int64
    assert i1.min() >= 0 and i1.max() < 2**40
    assert not np.array_equal(gen.batch(6, 4000)[1], i1)
    # Zipf skew: the most frequent id of the biggest feature covers a large share of rows.
    _, counts = np.unique(i1[:, 25], return_counts=True)
    assert counts.max() > 0.05 * 4000
    # Labels follow the planted probabilities.
    assert abs(y1.mean() - p1.mean()) < 3 * np.sqrt(p1.mean() * (1 - p1.mean()) / 4000)
    assert auc(y1, p1) > 0.7


def test_tabulated_terms_give_the_batches_hashing_each_row_gives():
    # Tabulated (every feature, the default), hashed per row (the formula itself), and a mix
    # (features past TABLE_MAX_RANKS are hashed): bit-identical batches.
    from tfps.data import synthetic
    cfg = SyntheticConfig(vocab_max=50_000, seed=4)
    tabulated, hashed = SyntheticCriteo(cfg), SyntheticCriteo(cfg, tabulate=False)
    limit = synthetic.TABLE_MAX_RANKS
    try:
        synthetic.TABLE_MAX_RANKS = 10_000
        mixed = SyntheticCriteo(cfg)
    finally:
        synthetic.TABLE_MAX_RANKS = limit
    assert sum(t is None for t in mixed._tables) not in (0, cfg.num_categorical)
    for index, size in ((0, 1000), (9, 257), (10**6, 1)):
        want = hashed.batch(index, size)
        for gen in (tabulated, mixed):
            for got, ref in zip(gen.batch(index, size), want):
                assert got.dtype == ref.dtype
                np.testing.assert_array_equal(got, ref)
