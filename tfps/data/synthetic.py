"""Criteo-shaped synthetic data with labels drawn from a planted model.

Each row: 13 dense features (log-normal counts), 26 categorical ids in a 2^40 space
(feature f's rank r maps to a fixed pseudo-random id), ranks drawn Zipf(s) over a finite
vocabulary per feature. The label is Bernoulli(sigmoid(logit)) with

    logit = bias + dense_w . log1p(dense) + sum_f w_f(id_f) + sum_{(f,g) in pairs} <v_f(id_f), v_g(id_g)>

where w and v are fixed pseudo-random functions of (feature, rank), damped by
(1 + rank / rank_scale)^-1/2 so that, as in real logs, popular ids carry most of the
learnable signal and the long tail regresses to the mean. The true probability of
each row is known, so the best AUC any model can reach on a sample (the oracle AUC) is the
AUC of those probabilities.
"""
import dataclasses

import numpy as np

try:
    from tfps._core import CdfSampler
except ImportError:   # a tree whose core module is not built: numpy alone, the same batches
    CdfSampler = None

ID_BITS = 40
TABLE_MAX_RANKS = 1 << 21   # SyntheticCriteo's default: features with more ranks are hashed per row
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(z):
    """splitmix64 finalizer on uint64 arrays."""
    z = np.asarray(z, np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _id_of_hash(h):
    """The id in the 2^40 space of a feature hash: its top ID_BITS bits."""
    return (h >> np.uint64(64 - ID_BITS)).astype(np.int64)


def _gauss(h):
    """A standard normal per uint64 hash (Box-Muller on two derived uniforms)."""
    u1 = ((_mix64(h) >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53
    u2 = (_mix64(h ^ np.uint64(0x5555555555555555)) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@dataclasses.dataclass
class SyntheticConfig:
    """Shape and difficulty of the synthetic data."""
    num_dense: int = 13
    num_categorical: int = 26
    vocab_min: int = 100            # smallest per-feature vocabulary
    vocab_max: int = 200_000        # largest; sizes are log-spaced between the two
    zipf: float = 1.2               # rank distribution exponent
    weight_scale: float = 0.35      # stddev of first-order weights
    factor_dim: int = 4             # latent size of planted pairwise interactions
    factor_scale: float = 0.35      # stddev of latent factors
    num_interacting: int = 6        # features 0..k-1 interact pairwise
    rank_scale: float = 200.0       # weights of rank r are damped by (1 + r / rank_scale)^-1/2
    bias: float = -1.0
    seed: int = 1


class SyntheticCriteo:
    """Deterministic batches: batch(i, n) is the same for the same config, i and n.

    table_max_ranks: each feature with at most this many ranks has its per-rank terms (ids,
    weights, factors) computed once, and a batch gathers them instead of hashing every row: the
    same batches, a demo batch of 1024 rows in 2.6 instead of 6.6 ms of CPU. 0: hash every row."""

    def __init__(self, config: SyntheticConfig, table_max_ranks=TABLE_MAX_RANKS):
        self.config = c = config
        if c.num_categorical <= 0 or c.num_dense < 0 or c.vocab_min <= 0 or c.vocab_max < c.vocab_min:
            raise ValueError(f"SyntheticConfig: bad sizes {c}")
        self.vocab_sizes = np.unique(np.round(np.geomspace(c.vocab_min, c.vocab_max, c.num_categorical))
                                     ).astype(np.int64)
        self.vocab_sizes = np.resize(self.vocab_sizes, c.num_categorical)
        self._cdfs = []
        for v in self.vocab_sizes:
            p = 1.0 / np.arange(1, v + 1, dtype=np.float64) ** c.zipf
            self._cdfs.append(np.cumsum(p) / p.sum())
        # A row's rank of each feature: numpy's searchsorted over its cdf, found by the core's
        # guide-table sampler (the same ranks at a fraction of the CPU, the GIL released).
        self._samplers = [CdfSampler(cdf) for cdf in self._cdfs] if CdfSampler is not None else None
        rng = np.random.default_rng(c.seed)
        self.dense_w = rng.normal(0, 0.15, c.num_dense)
        # What a row's rank contributes depends on (feature, rank) only. Ranks 0 .. v: the cdf's
        # last value can round below 1.0, so a draw just under 1 lands on rank v.
        self._tables = [self._rank_terms(f, np.arange(v + 1)) if v <= table_max_ranks else None
                        for f, v in enumerate(self.vocab_sizes)]

    def _feature_hash(self, f, ranks):
        salt = np.uint64((self.config.seed * 1000003 + f) << 20)
        return _mix64(ranks.astype(np.uint64) + _mix64(salt))

    def _rank_terms(self, f, ranks):
        """(ids, first-order logit term, latent factors [n, factor_dim] or None) of feature f's ranks."""
        c = self.config
        h = self._feature_hash(f, ranks)
        ids = _id_of_hash(h)
        damp = (1.0 + ranks / c.rank_scale) ** -0.5
        weight = c.weight_scale * damp * _gauss(h ^ np.uint64(0xABCDEF))
        factors = None
        if f < c.num_interacting:
            factors = (np.stack([_gauss(h + np.uint64(7919 * (k + 1))) for k in range(c.factor_dim)], 1)
                       * (c.factor_scale * np.sqrt(damp))[:, None])
        return ids, weight, factors

    def ids_of(self, f, ranks):
        """The int64 id in the 2^40 space of feature f's rank(s)."""
        return _id_of_hash(self._feature_hash(f, ranks))

    def batch(self, index, size):
        """(dense float32 [n, 13], ids int64 [n, 26], labels float32 [n], true probabilities [n])."""
        c = self.config
        rng = np.random.default_rng([c.seed, index])
        dense = np.floor(rng.lognormal(1.0, 1.2, (size, c.num_dense))).astype(np.float32)
        logit = c.bias + np.log1p(dense) @ self.dense_w - 0.15 * self.dense_w.sum()
        ids = np.empty((size, c.num_categorical), np.int64)
        factors = []
        for f in range(c.num_categorical):
            u = rng.random(size)
            ranks = (self._samplers[f].ranks(u) if self._samplers is not None else
                     np.searchsorted(self._cdfs[f], u, side="right"))
            table = self._tables[f]
            f_ids, weight, factor = (self._rank_terms(f, ranks) if table is None else
                                     tuple(None if t is None else t[ranks] for t in table))
            ids[:, f] = f_ids
            logit += weight
            if factor is not None:
                factors.append(factor)
        for a in range(len(factors)):
            for b in range(a + 1, len(factors)):
                logit += (factors[a] * factors[b]).sum(1)
        prob = 1.0 / (1.0 + np.exp(-logit))
        labels = (rng.random(size) < prob).astype(np.float32)
        return dense, ids, labels, prob


def auc(labels, scores):
    """Exact ROC AUC (ties count one half) of scores against 0/1 labels."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, np.float64)
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), np.float64)
    sorted_scores = scores[order]
    # Average ranks over ties.
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        raise ValueError("auc: labels need both classes")
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def write_criteo_text(gen, path, rows, first_batch=0, batch_size=8192, missing=0.05):
    """Writes `rows` examples of the generator as Criteo text (label, 13 integers, 26 hex
    categoricals; gzip when path ends in .gz), a share `missing` of the fields left empty. The
    planted signal survives: integers are the rounded counts, categoricals the ids' low 32 bits.
    Needs num_dense 13 and num_categorical 26. Returns the rows written."""
    import gzip
    c = gen.config
    if (c.num_dense, c.num_categorical) != (13, 26):
        raise ValueError("write_criteo_text: the Criteo layout has 13 integer and 26 categorical features")
    rng = np.random.default_rng(c.seed + 7)
    with (gzip.open(path, "wt") if str(path).endswith(".gz") else open(path, "w")) as f:
        written, b = 0, first_batch
        while written < rows:
            n = min(batch_size, rows - written)
            dense, ids, labels, _ = gen.batch(b, n)
            ints = np.round(dense).astype(np.int64).astype(str)
            cats = np.char.mod("%08x", (ids & 0xFFFFFFFF).astype(np.int64))
            fields = np.concatenate([labels.astype(np.int64).astype(str)[:, None], ints, cats], 1).astype(object)
            fields[:, 1:][rng.random((n, 39)) < missing] = ""
            f.write("".join("\t".join(row) + "\n" for row in fields))
            written, b = written + n, b + 1
    return written
