"""Numpy mirror of kernels/core/initializer.h: the oracle for initial row values."""
import math

import numpy as np

M64 = (1 << 64) - 1

_A = [3.3871328727963666080e0, 1.3314166789178437745e+2, 1.9715909503065514427e+3, 1.3731693765509461125e+4,
      4.5921953931549871457e+4, 6.7265770927008700853e+4, 3.3430575583588128105e+4, 2.5090809287301226727e+3]
_B = [1.0, 4.2313330701600911252e+1, 6.8718700749205790830e+2, 5.3941960214247511077e+3,
      2.1213794301586595867e+4, 3.9307895800092710610e+4, 2.8729085735721942674e+4, 5.2264952788528545610e+3]
_C = [1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0, 3.64784832476320460504e0,
      1.27045825245236838258e0, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4]
_D = [1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
      1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9]
_E = [6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0, 2.96560571828504891230e-1,
      2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7]
_F = [1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
      7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15]


def mix64(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _poly(c, x):
    r = c[7]
    for i in range(6, -1, -1):
        r = r * x + c[i]
    return r


def normal_quantile(p):
    """AS241 Phi^-1(p)."""
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        return q * _poly(_A, r) / _poly(_B, r)
    r = math.sqrt(-math.log(p if q < 0 else 1.0 - p))
    if r <= 5.0:
        v = _poly(_C, r - 1.6) / _poly(_D, r - 1.6)
    else:
        v = _poly(_E, r - 5.0) / _poly(_F, r - 5.0)
    return -v if q < 0 else v


_LOW = 0.5 * math.erfc(2.0 / math.sqrt(2.0))


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
        u = ((mix64(base + (j << 32)) >> 11) + 0.5) * 2.0**-53
        if kind == "uniform":
            out[j] = a + (b - a) * u
        elif kind == "normal":
            out[j] = a + b * normal_quantile(u)
        else:
            out[j] = a + b * normal_quantile(_LOW + u * (1.0 - 2.0 * _LOW))
    return out.astype(np.float32)


def init_rows(spec, keys, dim):
    """float32 [len(keys), dim] for an EmbeddingVariable.initializer_spec."""
    kind, a, b, seed = spec
    return np.stack([init_row(kind, a, b, seed, int(k), dim) for k in keys]) if len(keys) else \
        np.zeros((0, dim), np.float32)
