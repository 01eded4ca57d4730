"""Maps TF initializer objects onto the table's deterministic per-key initializers."""
import math
import zlib

_CONSTANT_NAMES = {"Zeros": 0.0, "zeros": 0.0, "Ones": 1.0, "ones": 1.0}


def stable_seed(name):
    """A seed derived from the variable name, the same in every process and run."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def init_spec(initializer, dim, name, default_seed=None):
    """(kind, a, b, seed) of `initializer` for a table of width `dim`.

    None means truncated_normal(0, 1/sqrt(dim)), the embedding_column default. The seed is the
    initializer's own, else default_seed, else one derived from `name`.
    Accepts TF's v1/v2/keras Zeros, Ones, Constant (scalar), RandomUniform,
    RandomNormal, TruncatedNormal, or a Python number (constant).
    """
    fallback = stable_seed(name) if default_seed is None else int(default_seed)
    if initializer is None:
        return "truncated_normal", 0.0, 1.0 / math.sqrt(dim), fallback
    if isinstance(initializer, (int, float)):
        return "constant", float(initializer), 0.0, 0
    if isinstance(initializer, type):
        initializer = initializer()
    cls = type(initializer).__name__
    seed = getattr(initializer, "seed", None)
    seed = fallback if seed is None else int(seed)
    if cls in _CONSTANT_NAMES:
        return "constant", _CONSTANT_NAMES[cls], 0.0, 0
    if cls == "Constant":
        value = getattr(initializer, "value", None)
        try:
            return "constant", float(value), 0.0, 0
        except (TypeError, ValueError):
            raise ValueError(f"get_embedding_variable({name!r}): Constant initializer needs a scalar "
                             f"value, got {value!r}") from None
    if cls in ("RandomUniform", "random_uniform_initializer"):
        return "uniform", float(initializer.minval), float(initializer.maxval), seed
    if cls in ("RandomNormal", "random_normal_initializer"):
        return "normal", float(initializer.mean), float(initializer.stddev), seed
    if cls in ("TruncatedNormal", "truncated_normal_initializer"):
        return "truncated_normal", float(initializer.mean), float(initializer.stddev), seed
    raise ValueError(f"get_embedding_variable({name!r}): unsupported initializer {cls}; use zeros, ones, "
                     f"constant, random_uniform, random_normal or truncated_normal")
