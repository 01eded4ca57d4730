"""tfps serve --model_config_file (TF Serving's text format): several models in one server, each
answering its own name with its own export's scores, fingerprint and step in the metadata, and a
file that is wrong refused naming what is wrong. Oracle: each export loaded on its own
(score_saved_model)."""
import os

import grpc
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import struct_pb2
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     model_service_pb2_grpc)

from tfps.serving.config import ServeConfig
from tfps.serving.models import read_model_config
from tfps.serving.servable import read_export_manifest
from tfps.serving.server import ModelServer
from serve_client import _request, _rest, _stub
from test_serve_inference import _input, _scores
from test_serving import score_saved_model

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve_runner")]


def _config(tmp_path, exports):
    """A model config file serving step 20's export as "early" and step 40's as "late"."""
    text = "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{os.path.dirname(exports[step])}" model_platform: "tensorflow" }}\n'
        for name, step in (("early", 20), ("late", 40))) + "}\n"
    path = tmp_path / "models.config"
    path.write_text(text)
    return str(path)



def _check_two_models(port, rest_port, runner):
    """Each name answers with its own export's scores, fingerprint and step; an unknown name is
    NOT_FOUND on every method."""
    rows, exports = runner["rows"], runner["exports"]
    stub = _stub(port)
    for name, step in (("early", 20), ("late", 40)):
        want = score_saved_model(exports[step], rows)
        got = stub.Predict(_request(rows, name=name), timeout=60)
        np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), want, rtol=1e-6, atol=1e-7)
        assert got.model_spec.name == name
        status, body = _rest(rest_port, f"/v1/models/{name}:predict",
                             {"inputs": {k: v.tolist() for k, v in rows.items()}})
        assert status == 200
        np.testing.assert_allclose(body["outputs"]["probabilities"], want, rtol=1e-6, atol=1e-7)
        # the export's fingerprint and global step, both APIs
        manifest = read_export_manifest(exports[step])
        assert manifest["step"] == step and len(manifest["fingerprint"]) == 16
        meta = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        meta.model_spec.name = name
        state = struct_pb2.Struct()
        stub.GetModelMetadata(meta, timeout=60).metadata["tfps_state"].Unpack(state)
        assert dict(state) == {"fingerprint": manifest["fingerprint"], "step": float(step)}
        status, body = _rest(rest_port, f"/v1/models/{name}/metadata")
        assert status == 200 and body["metadata"]["tfps_state"] == {"fingerprint": manifest["fingerprint"],
                                                                     "step": step}
        q = get_model_status_pb2.GetModelStatusRequest()
        q.model_spec.name = name
        states = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}")) \
            .GetModelStatus(q, timeout=60).model_version_status
        assert [s.version for s in states] == [int(os.path.basename(exports[step]))]
    assert read_export_manifest(exports[20])["fingerprint"] == read_export_manifest(exports[40])["fingerprint"]
    meta = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    meta.model_spec.name = "demo"
    q = get_model_status_pb2.GetModelStatusRequest()
    q.model_spec.name = "demo"
    for call in (lambda: stub.Predict(_request(rows, name="demo"), timeout=60),
                 lambda: stub.GetModelMetadata(meta, timeout=60),
                 lambda: model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
                 .GetModelStatus(q, timeout=60)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "'demo'" in e.value.details()
    for path in ("/v1/models/demo:predict", "/v1/models/demo", "/v1/models/demo/metadata"):
        assert _rest(rest_port, path, {"instances": [{"dense": [0.0] * 13, "ids": [0] * 26}]}
                     if path.endswith("predict") else None)[0] == 404


def test_model_config_file_serves_two_models_each_by_its_name(runner, tmp_path):
    models = read_model_config(_config(tmp_path, runner["exports"]))
    assert [m.name for m in models] == ["early", "late"]
    server = ModelServer(ServeConfig(models=tuple(models), port=0, rest_api_port=0, host="127.0.0.1"),
                         printer=lambda *a, **k: None)
    server.start()
    try:
        _check_two_models(server.port, server.rest_api_port, runner)
        # Classify on each model: its own scores
        for name, step in (("early", 20), ("late", 40)):
            req = classification_pb2.ClassificationRequest()
            req.model_spec.name = name
            req.input.CopyFrom(_input(runner["rows"]))
            scores = _scores(_stub(server.port).Classify(req, timeout=60).result)[1]
            np.testing.assert_allclose(scores[:, 1], score_saved_model(runner["exports"][step], runner["rows"]),
                                       rtol=1e-6, atol=1e-7)
    finally:
        server.stop()


@pytest.mark.parametrize("text, words", [
    ("model_config_list { config { name: 'a' base_path: 'B' } ", "not a text-format ModelServerConfig"),
    ("", "no model"),
    ("model_config_list { config { name: 'a' base_path: 'B' } config { name: 'a' base_path: 'B' } }", "twice"),
    ("model_config_list { config { name: 'a' base_path: 'B' model_platform: 'pytorch' } }", "pytorch"),
    ("model_config_list { config { name: 'a/b' base_path: 'B' } }", "'a/b'"),
    ("model_config_list { config { name: 'a' } }", "no base_path"),
    ("model_config_list { config { name: 'a' base_path: 'B' model_version_policy { all {} } } }", "policy all"),
])
def test_a_model_config_file_that_is_wrong_is_refused_by_name(tmp_path, text, words):
    (tmp_path / "B").mkdir()
    path = tmp_path / "models.config"
    path.write_text(text.replace("'B'", f"'{tmp_path / 'B'}'"))
    with pytest.raises(ValueError, match="models.config") as e:
        read_model_config(str(path))
    assert words in str(e.value)


def test_a_model_config_file_naming_no_directory_is_refused(tmp_path, cli):
    path = tmp_path / "models.config"
    path.write_text(f"model_config_list {{ config {{ name: 'a' base_path: '{tmp_path / 'none'}' }} }}")
    code, _, err = cli("serve", "--model_config_file", str(path))
    assert code == 1 and "base_path" in err
    code, _, err = cli("serve", "--model_config_file", str(path), "--model_base_path", str(tmp_path),
                       "--model_name", "a")
    assert code == 2 and "--model_config_file" in err
