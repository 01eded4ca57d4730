"""Loads tfps/_tfps_ops.so once; fails loudly naming the TF it was built for."""
import json
import os

import tensorflow as tf

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SO = os.path.join(_HERE, "_tfps_ops.so")
_INFO = os.path.join(_HERE, "_build_info.json")
_module = None


def built_for():
    """The TensorFlow version the library was built against, or None."""
    try:
        with open(_INFO) as f:
            return json.load(f).get("tensorflow")
    except (OSError, ValueError):
        return None


def _rebuild():
    """How to rebuild for the TensorFlow installed here (its line: make's TF=)."""
    line = ".".join(tf.__version__.split(".")[:2])
    return f"`make build TF={line}` (or `python setup.py build_ops` with this TensorFlow)"


def load():
    """The op module of tfps/_tfps_ops.so (loaded on first call)."""
    global _module
    if _module is None:
        if not os.path.exists(_SO):
            raise ImportError(f"tfps: {_SO} is missing; build it with {_rebuild()}")
        try:
            _module = tf.load_op_library(_SO)
        except (tf.errors.NotFoundError, OSError) as e:
            raise ImportError(
                f"tfps: cannot load {_SO}: built for TensorFlow {built_for()}, installed is "
                f"TensorFlow {tf.__version__}; rebuild with {_rebuild()}. Cause: {e}") from e
        if built_for() not in (None, tf.__version__):
            raise ImportError(f"tfps: {_SO} was built for TensorFlow {built_for()} but "
                              f"TensorFlow {tf.__version__} is installed; rebuild with {_rebuild()}")
    return _module
