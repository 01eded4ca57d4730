"""What the serving tests call a server with: a PredictRequest built the way a stock TF Serving
client builds one, a stock gRPC stub, a REST call."""
import json
import urllib.error
import urllib.request

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def _request(rows, version=None, name="demo"):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    if version is not None:
        req.model_spec.version.value = version
    for k, v in rows.items():
        req.inputs[k].CopyFrom(tf.make_tensor_proto(v))
    return req


def _stub(port):
    return prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


def _rest(port, path, body=None, host="127.0.0.1", raw=None):
    """(HTTP status, JSON answer) of a REST call: body as JSON, or raw bytes as they are."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://{host}:{port}{path}", data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

