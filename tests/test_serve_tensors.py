"""tfps.serving.tensors against TensorFlow's own conversions (tf.make_tensor_proto and
tf.make_ndarray, the oracle): every dtype the wire can carry as bytes, scalars, empty and
multi-dimensional shapes, protos with typed value fields, and content that does not fill its shape."""
import numpy as np
import pytest
import tensorflow as tf

from tfps.serving import tensors

SHAPES = [(), (0,), (1,), (3, 4), (2, 0, 5), (2, 3, 2)]
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int16, np.int8, np.uint8, np.uint16, np.uint32,
          np.uint64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numeric_round_trips_match_tensorflows_conversions(dtype):
    rng = np.random.default_rng(3)
    for shape in SHAPES:
        array = (rng.standard_normal(shape) * 100).astype(dtype)
        mine = tensors.to_proto(array)
        theirs = tf.make_tensor_proto(array)
        assert mine.dtype == theirs.dtype and mine.tensor_shape == theirs.tensor_shape
        np.testing.assert_array_equal(tf.make_ndarray(mine), array)   # TF reads what we write
        back = tensors.to_array(theirs, list(shape))                   # we read what TF writes
        assert back.dtype == array.dtype and back.shape == array.shape
        np.testing.assert_array_equal(back, array)


def test_typed_fields_and_strings_decode_as_tensorflow_does():
    by_hand = tf.make_tensor_proto(0.0, shape=[2, 3])   # one float_val for the whole shape
    assert not by_hand.tensor_content
    np.testing.assert_array_equal(tensors.to_array(by_hand, [2, 3]), tf.make_ndarray(by_hand))
    listed = tf.make_tensor_proto([1, 2, 3], dtype=tf.int64)
    listed.ClearField("tensor_content")
    listed.int64_val.extend([1, 2, 3])
    np.testing.assert_array_equal(tensors.to_array(listed, [3]), [1, 2, 3])
    words = np.array([[b"a", b"bc"], [b"", b"\xff"]], dtype=object)
    proto = tensors.to_proto(words)
    assert proto.dtype == tf.string.as_datatype_enum
    np.testing.assert_array_equal(tensors.to_array(proto, [2, 2]), words)
    half = np.array([1.5, -2.0], dtype=np.float16)
    np.testing.assert_array_equal(tensors.to_array(tensors.to_proto(half), [2]), half)


def test_content_that_does_not_fill_the_shape_is_an_error():
    proto = tensors.to_proto(np.arange(6, dtype=np.float32))
    with pytest.raises(ValueError, match="6 values"):
        tensors.to_array(proto, [2, 4])
    proto.tensor_content = proto.tensor_content[:-2]   # not a whole number of float32s
    with pytest.raises(ValueError):
        tensors.to_array(proto, [6])


def test_a_request_input_of_an_unknown_dtype_is_invalid_argument():
    """An enum TensorFlow does not know (proto3 keeps it) is the client's error, named, never a crash."""
    from types import SimpleNamespace
    from tfps.serving.errors import ServingError
    from tfps.serving.grpc_api import to_arrays
    signature = SimpleNamespace(enums={"x": tf.float32.as_datatype_enum}, inputs={"x": ("x:0", tf.float32, [None])})
    proto = tensors.to_proto(np.zeros([2], np.float32))
    proto.dtype = 999
    for name in ("x", "y"):   # an input the signature has, and one it lacks
        with pytest.raises(ServingError) as e:
            to_arrays({name: proto}, signature, 1 << 20)
        assert e.value.code == "INVALID_ARGUMENT" and "999" in e.value.message
