"""Numpy mirror of kernels/core/initializer.h: the oracle for initial row values."""
import numpy as np

M64 = (1 << 64) - 1


def mix64(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _unit(h):
    return (h >> 11) * 2.0**-53


def _normal(base, j, t):
    u1 = 1.0 - _unit(mix64(base + (j << 32) + 2 * t))
    u2 = _unit(mix64(base + (j << 32) + 2 * t + 1))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def init_row(kind, a, b, seed, key, dim):
    """float32 [dim] initial value of `key` (int) for a table initializer."""
    if kind == "zeros":
        return np.zeros(dim, np.float32)
    if kind == "constant":
        return np.full(dim, a, np.float32)
    a, b = float(np.float32(a)), float(np.float32(b))
    base = mix64((key & M64) ^ mix64((seed & M64) + 0x9E3779B97F4A7C15))
    out = np.empty(dim, np.float64)
    for j in range(dim):
        if kind == "uniform":
            out[j] = a + (b - a) * _unit(mix64(base + (j << 32)))
        elif kind == "normal":
            out[j] = a + b * _normal(base, j, 0)
        else:
            z, t = _normal(base, j, 0), 1
            while abs(z) > 2.0 and t < 64:
                z, t = _normal(base, j, t), t + 1
            out[j] = a + b * min(2.0, max(-2.0, z))
    return out.astype(np.float32)


def init_rows(spec, keys, dim):
    """float32 [len(keys), dim] for an EmbeddingVariable.initializer_spec."""
    kind, a, b, seed = spec
    return np.stack([init_row(kind, a, b, seed, int(k), dim) for k in keys]) if len(keys) else \
        np.zeros((0, dim), np.float32)
