"""Maps TF initializer objects onto the table's deterministic per-key initializers."""
import math
import zlib

_CONSTANT_NAMES = {"Zeros": 0.0, "zeros": 0.0, "Ones": 1.0, "ones": 1.0}
_NORMAL_KINDS = {"RandomNormal": "normal", "random_normal_initializer": "normal",
                 "TruncatedNormal": "truncated_normal", "truncated_normal_initializer": "truncated_normal"}
# Initializers whose scale comes from the variable's full shape (fan-in / fan-out).
# (Glorot, He and Lecun initializers derive from VarianceScaling.)
_FAN_BASED = ("VarianceScaling", "Orthogonal", "Identity")


def stable_seed(name):
    """A seed derived from the variable name, the same in every process and run."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def _user_seed(initializer, name):
    """The seed the user gave the initializer, or None. Keras 3 (tf.keras from TF 2.16) draws a
    random seed for an initializer made without one and keeps it in `.seed`: taken as it is, runs
    would stop being reproducible; its get_config() has the seed given (as TF's and Keras 2's do)."""
    get_config = getattr(initializer, "get_config", None)
    seed = get_config().get("seed") if callable(get_config) else getattr(initializer, "seed", None)
    if seed is None:
        return None
    try:
        return int(seed)
    except (TypeError, ValueError):
        raise ValueError(f"get_embedding_variable({name!r}): the initializer's seed must be an integer, got "
                         f"{seed!r}") from None


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
    seed = _user_seed(initializer, name)
    seed = fallback if seed is None else seed
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
        # TF's defaults: minval 0, maxval None = 1 for floats.
        low = 0.0 if initializer.minval is None else float(initializer.minval)
        high = 1.0 if initializer.maxval is None else float(initializer.maxval)
        if not low <= high:
            raise ValueError(f"get_embedding_variable({name!r}): random_uniform needs minval <= maxval, "
                             f"got {low} > {high}")
        return "uniform", low, high, seed
    if cls in _NORMAL_KINDS:
        stddev = float(initializer.stddev)
        if not stddev >= 0:
            raise ValueError(f"get_embedding_variable({name!r}): {cls} needs stddev >= 0, got {stddev}")
        return _NORMAL_KINDS[cls], float(initializer.mean), stddev, seed
    if any(c.__name__ in _FAN_BASED for c in type(initializer).__mro__):
        raise ValueError(f"get_embedding_variable({name!r}): {cls} scales by the variable's fan-in and fan-out, "
                         f"and a hash-table embedding has no vocabulary size to take them from; pass "
                         f"random_uniform or truncated_normal with an explicit scale (e.g. "
                         f"truncated_normal_initializer(stddev={1 / math.sqrt(dim):.4g}), which is 1/sqrt(dim))")
    raise ValueError(f"get_embedding_variable({name!r}): unsupported initializer {cls}; use zeros, ones, "
                     f"constant, random_uniform, random_normal or truncated_normal")
