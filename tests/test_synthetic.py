"""The synthetic generator and the exact AUC against brute-force oracles."""
import numpy as np

from tfps.data import SyntheticConfig, SyntheticCriteo, auc, synthetic


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



def _batch_by_formula(gen, index, size):
    """The oracle: batch(index, size) computed row by row from the planted model as the module
    docstring states it (hash each row's rank, derive its id, weight and factors)."""
    c = gen.config
    rng = np.random.default_rng([c.seed, index])
    dense = np.floor(rng.lognormal(1.0, 1.2, (size, c.num_dense))).astype(np.float32)
    logit = c.bias + np.log1p(dense) @ gen.dense_w - 0.15 * gen.dense_w.sum()
    ids = np.empty((size, c.num_categorical), np.int64)
    factors = []
    for f in range(c.num_categorical):
        ranks = np.searchsorted(gen._cdfs[f], rng.random(size), side="right")
        salt = np.uint64((c.seed * 1000003 + f) << 20)
        h = synthetic._mix64(ranks.astype(np.uint64) + synthetic._mix64(salt))
        ids[:, f] = (h >> np.uint64(64 - synthetic.ID_BITS)).astype(np.int64)
        damp = (1.0 + ranks / c.rank_scale) ** -0.5
        logit += c.weight_scale * damp * synthetic._gauss(h ^ np.uint64(0xABCDEF))
        if f < c.num_interacting:
            factors.append(np.stack([synthetic._gauss(h + np.uint64(7919 * (k + 1))) for k in range(c.factor_dim)], 1)
                           * (c.factor_scale * np.sqrt(damp))[:, None])
    for a in range(len(factors)):
        for b in range(a + 1, len(factors)):
            logit += (factors[a] * factors[b]).sum(1)
    prob = 1.0 / (1.0 + np.exp(-logit))
    labels = (rng.random(size) < prob).astype(np.float32)
    return dense, ids, labels, prob


def test_tabulated_terms_give_the_batches_of_the_formula():
    # Every feature tabulated (the default), none (hashed per row) and a mix: bit-identical to
    # the row-by-row formula.
    cfg = SyntheticConfig(vocab_max=50_000, seed=4)
    gens = [SyntheticCriteo(cfg), SyntheticCriteo(cfg, table_max_ranks=0), SyntheticCriteo(cfg, table_max_ranks=10_000)]
    assert [sum(t is None for t in g._tables) for g in gens][:2] == [0, cfg.num_categorical]
    assert 0 < sum(t is None for t in gens[2]._tables) < cfg.num_categorical
    for index, size in ((0, 1000), (9, 257), (10**6, 1)):
        want = _batch_by_formula(gens[0], index, size)
        for gen in gens:
            for got, ref in zip(gen.batch(index, size), want):
                assert got.dtype == ref.dtype
                np.testing.assert_array_equal(got, ref)


def test_a_draw_just_under_one_finds_its_rank_in_the_table():
    # The cdf's last value can round below 1.0: a uniform draw just under 1 then lands on rank v
    # (one past the vocabulary), which the per-row formula hashes like any other rank.
    gen = SyntheticCriteo(SyntheticConfig())
    short = [f for f, cdf in enumerate(gen._cdfs) if cdf[-1] < 1.0]
    assert short, "no feature's cdf ends below 1.0 in this config: the case is not reached"
    f = short[0]
    v = int(gen.vocab_sizes[f])
    rank = np.searchsorted(gen._cdfs[f], np.array([1.0 - 2.0**-53]), side="right")
    assert rank[0] == v
    ids, weight, _ = gen._rank_terms(f, rank)
    assert gen._tables[f][0][v] == ids[0] == gen.ids_of(f, rank)[0]
    assert gen._tables[f][1][v] == weight[0]


def test_the_cores_cdf_sampler_is_numpys_searchsorted():
    """tfps._core.CdfSampler (a guide table, then a binary search between two guide points)
    against numpy.searchsorted(side="right"): random and Zipf cdfs, runs of equal values, values
    just above 1 (a cumulative sum's rounding), u at every guide point, on every cdf value and
    its neighbours; and a bad cdf is refused."""
    import pytest
    from tfps._core import CdfSampler
    rng = np.random.default_rng(9)
    p = 1.0 / np.arange(1, 200_001) ** 1.2
    flat = np.repeat(np.sort(rng.random(300)), rng.integers(1, 5, 300))   # ties
    for cdf in (np.cumsum(p) / p.sum(), np.sort(rng.random(1000)), flat, np.array([1.0 + 2**-52]), np.array([0.0])):
        probes = np.concatenate([rng.random(50_000), np.arange(4097) / 4096.0, cdf, np.nextafter(cdf, -1),
                                 np.nextafter(cdf, 2), [0.0, 1.0 - 2**-53, 1.0, 1.5, -0.5]])
        np.testing.assert_array_equal(CdfSampler(cdf).ranks(probes), np.searchsorted(cdf, probes, side="right"))
    for bad in (np.array([0.5, 0.4]), np.array([]), np.array([np.nan])):
        with pytest.raises(ValueError, match="cdf"):
            CdfSampler(bad)


def test_batches_with_the_cores_sampler_equal_numpys():
    gen, plain = SyntheticCriteo(SyntheticConfig(seed=4)), SyntheticCriteo(SyntheticConfig(seed=4))
    assert gen._samplers is not None
    plain._samplers = None
    for index in range(5):
        for a, b in zip(gen.batch(index, 3000), plain.batch(index, 3000)):
            np.testing.assert_array_equal(a, b)
