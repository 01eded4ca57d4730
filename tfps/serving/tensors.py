"""TensorProto <-> numpy for the request path, without TensorFlow's generic conversions.

A numeric tensor travels as `tensor_content` (its bytes, little-endian, row-major): decoded with
one np.frombuffer, encoded with one tobytes(). A proto that gives its values in the typed fields
(float_val, int64_val, ...: what a client that builds protos by hand sends), or a dtype without a
numpy twin here (half, bfloat16, complex, resource), goes through tf.make_ndarray, which knows
them all. Strings use string_val both ways."""
import math

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2

# The dtypes whose tensor_content is a plain numpy buffer (the machine is little-endian, as is the wire).
_NUMPY = {types_pb2.DT_FLOAT: np.float32, types_pb2.DT_DOUBLE: np.float64, types_pb2.DT_INT32: np.int32,
          types_pb2.DT_INT64: np.int64, types_pb2.DT_INT16: np.int16, types_pb2.DT_INT8: np.int8,
          types_pb2.DT_UINT8: np.uint8, types_pb2.DT_UINT16: np.uint16, types_pb2.DT_UINT32: np.uint32,
          types_pb2.DT_UINT64: np.uint64, types_pb2.DT_BOOL: np.bool_}
_ENUM = {np.dtype(v): k for k, v in _NUMPY.items()}


_ITEMSIZE = {**{k: np.dtype(v).itemsize for k, v in _NUMPY.items()},
             types_pb2.DT_INVALID: 16, types_pb2.DT_STRING: 16}   # a string: a Python object (~16 bytes of
                                                                  # references) however short


def itemsize(enum):
    """Bytes an element of dtype `enum` takes once decoded; TypeError for an enum that names no dtype."""
    size = _ITEMSIZE.get(enum)
    return size if size is not None else tf.dtypes.as_dtype(enum).size


def to_array(proto, shape):
    """The array of `proto` (a TensorProto whose dtype and `shape`, a list of ints, the caller
    has checked). Raises ValueError for content that does not fill the shape."""
    dtype, content = _NUMPY.get(proto.dtype), proto.tensor_content   # (each read of a field copies it)
    if dtype is not None and content:
        flat = np.frombuffer(content, dtype=dtype)
        if flat.size != math.prod(shape):
            raise ValueError(f"tensor_content holds {flat.size} values, the shape {shape} needs {math.prod(shape)}")
        return flat.reshape(shape)
    return tf.make_ndarray(proto)


def fill(proto, array):
    """Writes `array` into the empty TensorProto `proto` (a response's output, in place)."""
    enum = _ENUM.get(array.dtype)
    if enum is None:   # strings, half, ...: TensorFlow's conversion
        proto.CopyFrom(tf.make_tensor_proto(array))
        return proto
    proto.dtype = enum
    dims = proto.tensor_shape.dim
    for n in array.shape:
        dims.add().size = n
    proto.tensor_content = np.ascontiguousarray(array).tobytes()
    return proto


def to_proto(array):
    """A new TensorProto of `array`."""
    return fill(tensor_pb2.TensorProto(), np.asarray(array))
