"""tfps export's `classification` and `regression` signatures over tf.train.Examples (the feature
specs tfps convert writes), served by tfps serve's Classify, Regress, MultiInference (gRPC, a stock
PredictionServiceStub) and :classify / :regress (REST). Oracle: Predict's scores on the same rows,
and the SavedModel loaded on its own (score_saved_model)."""
import concurrent.futures
import os

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, inference_pb2, input_pb2, regression_pb2

from tfps.data.sources import example_specs
from tfps.serving.config import ServeConfig
from tfps.serving.server import ModelServer
from serve_client import _request, _rest, _stub
from test_serving import score_saved_model

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve_runner")]


def _server(path, **kw):
    return ModelServer(ServeConfig(os.path.dirname(path), "demo", port=0, rest_api_port=0, host="127.0.0.1", **kw),
                       printer=lambda *a, **k: None).start()


def _example(dense=None, ids=None):
    """A tf.train.Example as a stock client writes one for the feature specs tfps convert writes:
    dense float [13], ids int [26] (either may be left out)."""
    feature = {}
    if dense is not None:
        feature["dense"] = tf.train.Feature(float_list=tf.train.FloatList(value=dense))
    if ids is not None:
        feature["ids"] = tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _input(rows, context=None):
    """An Input of the rows' Examples; with a context, the context's features are not repeated."""
    out = input_pb2.Input()
    if context is None:
        for d, i in zip(rows["dense"], rows["ids"]):
            out.example_list.examples.add().CopyFrom(_example(d, i))
    else:
        out.example_list_with_context.context.CopyFrom(context)
        for i in rows["ids"]:
            out.example_list_with_context.examples.add().CopyFrom(_example(ids=i))
    return out


def _classify(stub, rows, signature="classification", context=None):
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = "demo"
    req.model_spec.signature_name = signature
    req.input.CopyFrom(_input(rows, context))
    return stub.Classify(req, timeout=60)


def _regress(stub, rows, signature="regression"):
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = "demo"
    req.model_spec.signature_name = signature
    req.input.CopyFrom(_input(rows))
    return stub.Regress(req, timeout=60)


def _scores(result):
    """ClassificationResult -> (labels per row, scores float32 [B, C])."""
    labels = [[c.label for c in row.classes] for row in result.classifications]
    return labels, np.array([[c.score for c in row.classes] for row in result.classifications], np.float32)


def test_the_export_takes_the_examples_tfps_convert_writes(runner):
    specs = example_specs(runner["cfg"])
    assert specs == [{"name": "dense", "type": "float", "length": 13},
                     {"name": "ids", "type": "int", "length": 26, "names": [f"C{i}" for i in range(1, 27)]}]


def test_classify_regress_and_multi_inference_give_predicts_scores(runner):
    rows, path = runner["rows"], runner["exports"][20]
    server = _server(path)
    try:
        stub = _stub(server.port)
        p = tf.make_ndarray(stub.Predict(_request(rows), timeout=60).outputs["probabilities"])
        np.testing.assert_allclose(p, score_saved_model(path, rows), rtol=1e-6, atol=1e-7)
        assert p[:8].std() > 0 and p.std() > 0   # unknown ids give default-row scores; rows differ
        version = int(os.path.basename(path))
        # Classify: classes "0" and "1", scores 1 - p and p; a request without a signature name
        # gets the classification signature (serving_default is a predict one)
        for signature in ("classification", ""):
            got = _classify(stub, rows, signature)
            labels, scores = _scores(got.result)
            assert labels == [["0", "1"]] * len(p)
            np.testing.assert_array_equal(scores[:, 1], p)
            np.testing.assert_allclose(scores[:, 0], 1 - p, rtol=1e-6, atol=1e-7)
            assert (got.model_spec.name, got.model_spec.version.value, got.model_spec.signature_name) == \
                ("demo", version, "classification")
        # a context's features go to every example
        same = {"dense": np.repeat(rows["dense"][:1], len(p), 0), "ids": rows["ids"]}
        want = tf.make_ndarray(stub.Predict(_request(same), timeout=60).outputs["probabilities"])
        _, scores = _scores(_classify(stub, same, context=_example(dense=rows["dense"][0])).result)
        np.testing.assert_array_equal(scores[:, 1], want)
        # Regress
        got = _regress(stub, rows)
        np.testing.assert_array_equal(np.array([r.value for r in got.result.regressions], np.float32), p)
        assert got.model_spec.signature_name == "regression"
        # MultiInference: both on the same examples
        req = inference_pb2.MultiInferenceRequest()
        for signature, method in (("classification", "tensorflow/serving/classify"),
                                  ("regression", "tensorflow/serving/regress")):
            task = req.tasks.add()
            task.model_spec.name, task.model_spec.signature_name, task.method_name = "demo", signature, method
        req.input.CopyFrom(_input(rows))
        results = stub.MultiInference(req, timeout=60).results
        np.testing.assert_array_equal(_scores(results[0].classification_result)[1][:, 1], p)
        np.testing.assert_array_equal(np.array([r.value for r in results[1].regression_result.regressions],
                                               np.float32), p)
        assert [r.model_spec.signature_name for r in results] == ["classification", "regression"]
        # REST, TF Serving's formats
        examples = [{"dense": d.tolist(), "ids": i.tolist()} for d, i in zip(rows["dense"], rows["ids"])]
        status, body = _rest(server.rest_api_port, "/v1/models/demo:classify", {"signature_name": "classification",
                                                                 "examples": examples})
        assert status == 200, body
        assert [[label for label, _ in row] for row in body["results"]] == [["0", "1"]] * len(p)
        np.testing.assert_array_equal(np.array([row[1][1] for row in body["results"]], np.float32), p)
        status, body = _rest(server.rest_api_port, f"/v1/models/demo/versions/{version}:regress", {"examples": examples})
        assert status == 200, body
        np.testing.assert_array_equal(np.array(body["results"], np.float32), p)
        status, body = _rest(server.rest_api_port, "/v1/models/demo:classify", {
            "context": {"dense": rows["dense"][0].tolist()}, "examples": [{"ids": i.tolist()} for i in rows["ids"]]})
        assert status == 200, body
        np.testing.assert_array_equal(np.array([row[1][1] for row in body["results"]], np.float32), want)
    finally:
        server.stop()


def test_examples_batch_with_each_other(runner):
    rows, path = runner["rows"], runner["exports"][20]
    server = _server(path, enable_batching=True, max_batch_size=16, batch_timeout_micros=20000)
    try:
        stub = _stub(server.port)
        p = tf.make_ndarray(stub.Predict(_request(rows), timeout=60).outputs["probabilities"])
        runs = server.batcher.runs

        def one(i):
            return _scores(_classify(stub, {k: v[i:i + 1] for k, v in rows.items()}).result)[1][0, 1]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(one, range(len(p))))
        np.testing.assert_allclose(got, p, rtol=1e-5, atol=1e-6)
        assert server.batcher.runs - runs < len(p) / 2   # requests were merged
    finally:
        server.stop()


def test_inference_errors_name_what_is_wrong(runner):
    rows, path = runner["rows"], runner["exports"][20]
    two = {k: v[:2] for k, v in rows.items()}
    server = _server(path)
    try:
        stub = _stub(server.port)
        no_ids = classification_pb2.ClassificationRequest()
        no_ids.model_spec.name = "demo"
        no_ids.input.example_list.examples.add().CopyFrom(_example(dense=rows["dense"][0]))
        empty = classification_pb2.ClassificationRequest()
        empty.model_spec.name = "demo"
        other = classification_pb2.ClassificationRequest()
        other.model_spec.name = "other"
        other.input.CopyFrom(_input(two))
        cases = [
            (lambda: _classify(stub, two, "serving_default"), grpc.StatusCode.INVALID_ARGUMENT, "predict"),
            (lambda: _classify(stub, two, "regression"), grpc.StatusCode.INVALID_ARGUMENT, "regress"),
            (lambda: _regress(stub, two, "classification"), grpc.StatusCode.INVALID_ARGUMENT, "classif"),
            (lambda: _classify(stub, two, "nope"), grpc.StatusCode.INVALID_ARGUMENT, "nope"),
            (lambda: stub.Classify(no_ids, timeout=60), grpc.StatusCode.INVALID_ARGUMENT, "ids"),
            (lambda: stub.Classify(empty, timeout=60), grpc.StatusCode.INVALID_ARGUMENT, "empty"),
            (lambda: stub.Classify(other, timeout=60), grpc.StatusCode.NOT_FOUND, "other"),
        ]
        for call, code, words in cases:
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == code and words in e.value.details(), (code, e.value.details())
        ok = {"dense": two["dense"][0].tolist(), "ids": two["ids"][0].tolist()}
        for path_, body, code in [
                ("/v1/models/demo:classify", {"examples": [{**ok, "dense": [0] * 13}]}, 400),   # ints: an int64 list
                ("/v1/models/demo:classify", {"examples": [{"dense": ok["dense"]}]}, 400),
                ("/v1/models/demo:regress", {"examples": [{**ok, "ids": [[1]]}]}, 400),
                ("/v1/models/demo:regress", {"instances": [ok]}, 400),
                ("/v1/models/other:classify", {"examples": [ok]}, 404)]:
            status, answer = _rest(server.rest_api_port, path_, body)
            assert status == code and isinstance(answer.get("error"), str) and answer["error"], (path_, answer)
        # still serving, and right
        got = _regress(stub, two)
        np.testing.assert_allclose([r.value for r in got.result.regressions],
                                   score_saved_model(path, two), rtol=1e-6, atol=1e-7)
    finally:
        server.stop()
