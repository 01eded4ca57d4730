"""A PredictRequest built the way a stock TF Serving client builds one (for the serving tests)."""
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2


def _request(rows, version=None, name="demo"):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    if version is not None:
        req.model_spec.version.value = version
    for k, v in rows.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto(v))
    return req
