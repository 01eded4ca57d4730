"""tfps serve: a stock PredictionServiceStub and the REST API get estimator.predict's scores;
versions swap under load with no failed request; bad requests get the right codes and the
server goes on. Oracle: estimator.predict on the same rows. (--follow and the model's state:
test_serve_state.py.)"""
import collections
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, model_service_pb2_grpc

from tfps.config import load_config
from tfps.data import SyntheticCriteo
from tfps.data.sources import eval_set, train_input_fn
from tfps.models.zoo import model_fn
from tfps.runner import train
from tfps.runner.job import export, params_of, predict, settings_of
from tfps.serving.config import ServeConfig
from tfps.serving.servable import Servable
from tfps.serving.server import ModelServer
from serve_client import _request, _rest, _stub
from serve_models import SETS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve")]   # the trained versions once

def _cfg(model_dir, *more):
    return load_config("configs/demo.yaml", SETS + [f"model_dir={model_dir}", *more])


def _rows(cfg, n=96):
    features, _, _ = eval_set(SyntheticCriteo(cfg.data), n, n)
    features = {k: v.copy() for k, v in features.items()}
    fields = features["ids"].shape[1]
    features["ids"][:16] = np.arange(16 * fields).reshape(16, fields) + 2**45   # ids never seen
    return features


def _predict(cfg, features):
    """The scores of the latest checkpoint (with its deltas) for features, by tfps.runner.predict."""
    return np.concatenate([p["probabilities"] for p in predict(
        cfg, lambda: tf.data.Dataset.from_tensor_slices(features).batch(len(features["ids"])))])


def _train(cfg, steps, hooks=(), listeners=(), **settings):
    """Trains cfg's model to global step `steps` on the runner (settings: RunSettings fields to
    change, e.g. no full checkpoints)."""
    run = dataclasses.replace(settings_of(cfg), **settings)
    train(model_fn, params_of(cfg), train_input_fn(SyntheticCriteo(cfg.data), cfg.train.batch_size), run, steps,
          hooks=hooks, saving_listeners=listeners, printer=lambda *a, **k: None)


def trained_model(root):
    """A model trained 40 steps, exported as a version; the rows and tfps.runner.predict's scores
    (the session fixture `trained`, tests/conftest.py)."""
    cfg = _cfg(root / "model")
    _train(cfg, 40)
    rows = _rows(cfg)
    return dict(cfg=cfg, rows=rows, want=_predict(cfg, rows), export=export(cfg, str(root / "export")))


def _predict_export(path, features):
    """The probabilities of the SavedModel at `path` on `features`, loaded on its own."""
    servable = Servable(path, 1)
    try:
        signature = servable.signature(None)
        return servable.run(signature, signature.check(features))["probabilities"]
    finally:
        servable.retire()


def _server(base, **kw):
    kw.setdefault("port", 0)
    kw.setdefault("rest_api_port", 0)
    kw.setdefault("host", "127.0.0.1")
    return ModelServer(ServeConfig(str(base), "demo", **kw), printer=lambda *a, **k: None).start()


def _polls(server, n):
    """Waits until the server has polled n more times (what it does with the files is then done)."""
    target = server.store.polls + n
    deadline = time.time() + 60
    while server.store.polls < target:
        assert time.time() < deadline
        time.sleep(0.02)


@pytest.mark.compat   # train -> export -> serve, also on the other TensorFlow line in CI
def test_a_stock_stub_and_rest_get_predicted_scores(trained):
    rows, want = trained["rows"], trained["want"]
    server = _server(os.path.dirname(trained["export"]))
    try:
        stub = _stub(server.port)
        got = stub.Predict(_request(rows), timeout=30)
        np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), want, rtol=1e-5, atol=1e-6)
        assert got.model_spec.version.value == int(os.path.basename(trained["export"]))
        status, body = _rest(server.rest_api_port, "/v1/models/demo:predict", {"instances": [
            {"dense": d.tolist(), "ids": i.tolist()} for d, i in zip(rows["dense"], rows["ids"])]})
        assert status == 200
        np.testing.assert_allclose([p["probabilities"] for p in body["predictions"]], want, rtol=1e-5, atol=1e-6)
        status, body = _rest(server.rest_api_port, f"/v1/models/demo/versions/{got.model_spec.version.value}:predict",
                             {"inputs": {k: v.tolist() for k, v in rows.items()}})
        assert status == 200
        np.testing.assert_allclose(body["outputs"]["probabilities"], want, rtol=1e-5, atol=1e-6)
        # metadata and status, both APIs
        meta = get_model_metadata_pb2.GetModelMetadataRequest()
        meta.model_spec.name = "demo"
        meta.metadata_field.append("signature_def")
        signatures = get_model_metadata_pb2.SignatureDefMap()
        stub.GetModelMetadata(meta, timeout=30).metadata["signature_def"].Unpack(signatures)
        assert set(signatures.signature_def["serving_default"].inputs) == {"dense", "ids"}
        status, body = _rest(server.rest_api_port, "/v1/models/demo/metadata")
        assert status == 200 and set(body["metadata"]["signature_def"]["signature_def"]["serving_default"]
                                     ["inputs"]) == {"dense", "ids"}
        q = get_model_status_pb2.GetModelStatusRequest()
        q.model_spec.name = "demo"
        states = model_service_pb2_grpc.ModelServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.port}")) \
            .GetModelStatus(q, timeout=30).model_version_status
        assert [(s.version, s.state) for s in states] == [(got.model_spec.version.value,
                                                           get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
        assert _rest(server.rest_api_port, "/v1/models/demo")[1]["model_version_status"][0]["state"] == "AVAILABLE"
    finally:
        server.stop()


def test_batching_merges_concurrent_single_rows_and_splits_them_back(trained):
    rows, want = trained["rows"], trained["want"]
    server = _server(os.path.dirname(trained["export"]), enable_batching=True, max_batch_size=16,
                     batch_timeout_micros=20000, num_batch_threads=2)
    try:
        stub = _stub(server.port)

        def one(i):
            got = stub.Predict(_request({k: v[i:i + 1] for k, v in rows.items()}), timeout=60)
            return tf.make_ndarray(got.outputs["probabilities"])[0]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(one, range(len(want))))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert server.batcher.requests == len(want)
        assert server.batcher.runs < len(want) / 2   # requests were merged
    finally:
        server.stop()


def test_bad_requests_get_their_codes_and_the_server_goes_on(trained):
    rows = trained["rows"]
    server = _server(os.path.dirname(trained["export"]), max_request_bytes=200_000)
    try:
        stub = _stub(server.port)
        ok = {k: v[:2] for k, v in rows.items()}
        cases = [
            (_request(ok, name="other"), grpc.StatusCode.NOT_FOUND, "other"),
            (_request(ok, version=7), grpc.StatusCode.NOT_FOUND, "version 7"),
            (_request({"ids": ok["ids"]}), grpc.StatusCode.INVALID_ARGUMENT, "missing ['dense']"),
            (_request({**ok, "extra": ok["ids"]}), grpc.StatusCode.INVALID_ARGUMENT, "unknown ['extra']"),
            (_request({**ok, "ids": ok["ids"].astype(np.float32)}), grpc.StatusCode.INVALID_ARGUMENT, "'ids' is float32"),
            (_request({**ok, "ids": ok["ids"][:, :5]}), grpc.StatusCode.INVALID_ARGUMENT, "'ids' has shape [2, 5]"),
            (_request({**ok, "dense": rows["dense"][:3]}), grpc.StatusCode.INVALID_ARGUMENT, "batch size"),
            (_request({**ok, "ids": ok["ids"].astype(np.int32)}), grpc.StatusCode.INVALID_ARGUMENT, "'ids' is int32"),
            (_request({k: np.repeat(v, 40, 0) for k, v in rows.items()}), grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
            (_bomb(ok), grpc.StatusCode.RESOURCE_EXHAUSTED, "--max_request_bytes"),
        ]
        for req, code, words in cases:
            with pytest.raises(grpc.RpcError) as e:
                stub.Predict(req, timeout=30)
            assert e.value.code() == code and words in e.value.details(), (code, e.value.details())
        instance = {"dense": ok["dense"][0].tolist(), "ids": ok["ids"][0].tolist()}
        rest = [
            ("/v1/models/other:predict", {"instances": [instance]}, None, 404),
            ("/v1/models/demo/versions/7:predict", {"instances": [instance]}, None, 404),
            ("/v1/models/demo:predict", {"instances": [{"dense": instance["dense"]}]}, None, 400),
            ("/v1/models/demo:predict", {"instances": [{**instance, "ids": [0.5] * 26}]}, None, 400),
            ("/v1/models/demo:predict", {"instances": [{**instance, "ids": [1, 2]}]}, None, 400),
            ("/v1/models/demo:predict", {"instances": [instance, {**instance, "ids": [1]}]}, None, 400),
            ("/v1/models/demo:predict", {"rows": [instance]}, None, 400),
            ("/v1/models/demo:predict", None, b"{not json", 400),
            ("/v1/models/demo:predict", None, b" " * 300_000, 413),
            ("/v1/models/demo:predict", None, iter([b" " * 100_000] * 3), 413),   # chunked: no length given
            ("/v1/models/demo:predict", {"signature_name": ["x"], "instances": [instance]}, None, 400),
            ("/v1/models/demo:predict", None, b"[" * 100_000 + b"]" * 100_000, 400),
            ("/v1/models/demo:explain", {"instances": [instance]}, None, 404),
            ("/v2/anything", None, None, 404),
        ]
        for path, body, raw, code in rest:
            status, answer = _rest(server.rest_api_port, path, body, raw=raw)
            assert status == code and isinstance(answer.get("error"), str) and answer["error"], (path, status, answer)
        # still serving, and right
        got = stub.Predict(_request(ok), timeout=30)
        np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), trained["want"][:2], rtol=1e-5,
                                   atol=1e-6)
    finally:
        server.stop()


@pytest.fixture(scope="session")   # the group "serve" on one worker: built once
def second(trained, tmp_path_factory):
    """The same model trained on to step 80, exported: (its SavedModel, tfps.runner.predict's scores)."""
    root = tmp_path_factory.mktemp("second")
    cfg2 = _cfg(root / "model2")
    shutil.copytree(trained["cfg"].model_dir, cfg2.model_dir)
    _train(cfg2, 80)
    want = _predict(cfg2, trained["rows"])
    assert np.abs(want - trained["want"]).max() > 1e-3
    return export(cfg2, str(root / "export2")), want


def test_model_spec_version_selects_a_loaded_version(trained, second, tmp_path):
    first = int(os.path.basename(trained["export"]))
    shutil.copytree(trained["export"], tmp_path / str(first))
    shutil.copytree(second[0], tmp_path / str(first + 1))
    server = _server(tmp_path, num_versions=2)
    try:
        stub = _stub(server.port)
        for version, want in ((first, trained["want"]), (first + 1, second[1]), (None, second[1])):
            got = stub.Predict(_request(trained["rows"], version=version), timeout=30)
            assert got.model_spec.version.value == (version or first + 1)
            np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), want, rtol=1e-5, atol=1e-6)
            status, body = _rest(server.rest_api_port, f"/v1/models/demo/versions/{version or first + 1}:predict",
                                 {"inputs": {k: v.tolist() for k, v in trained["rows"].items()}})
            np.testing.assert_allclose(body["outputs"]["probabilities"], want, rtol=1e-5, atol=1e-6)
    finally:
        server.stop()


def _bomb(ok):
    """A request of a few bytes whose ids claim 3M rows (a proto may give one value for a whole shape)."""
    req = _request(ok)
    req.inputs["ids"].CopyFrom(tf.make_tensor_proto(1, dtype=tf.int64, shape=[3_000_000, 26]))
    assert req.ByteSize() < 1000
    return req


def test_versions_roll_back_retry_and_ignore_what_is_not_a_version(trained, second, tmp_path):
    first = int(os.path.basename(trained["export"]))
    shutil.copytree(trained["export"], tmp_path / str(first))
    for name in ("³", "99999999999999999999", "v2", ".tmp"):   # not versions: ignored
        shutil.copytree(second[0], tmp_path / name)
    server = _server(tmp_path, poll_secs=0.1)
    stub = _stub(server.port)

    def served():
        got = stub.Predict(_request(trained["rows"]), timeout=30)
        return got.model_spec.version.value, tf.make_ndarray(got.outputs["probabilities"])

    def wait_for(version):
        deadline = time.time() + 30
        while served()[0] != version:
            assert time.time() < deadline, (version, server.store.status())
            time.sleep(0.05)
    try:
        assert served()[0] == first
        # a version half copied fails to load, and is retried once its directory is whole
        newer = tmp_path / str(first + 1)
        newer.mkdir()
        shutil.copy(os.path.join(second[0], "saved_model.pb"), newer)
        _polls(server, 2)
        assert served()[0] == first and [s[1] for s in server.store.status()] == ["AVAILABLE", "END"]
        shutil.copytree(os.path.join(second[0], "variables"), newer / "variables")
        wait_for(first + 1)
        np.testing.assert_allclose(served()[1], second[1], rtol=1e-5, atol=1e-6)
        # removing the served version rolls back to the one before it
        shutil.rmtree(newer)
        wait_for(first)
        np.testing.assert_allclose(served()[1], trained["want"], rtol=1e-5, atol=1e-6)
        _polls(server, 3)
        assert list(server.store.loaded()) == [first] and server.store.swaps == 3   # no reload loop
        # a second server cannot take the same port
        with pytest.raises(OSError, match="in use"):
            _server(tmp_path, port=server.port)
    finally:
        server.stop()


def _wait_for(condition, what, timeout=120):
    """Waits (polling every 10 ms) until condition() holds; AssertionError naming `what` after timeout s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_new_version_swaps_in_under_load_with_no_failed_request(trained, second, tmp_path):
    base = tmp_path / "versions"
    base.mkdir()
    first = int(os.path.basename(trained["export"]))
    shutil.copytree(trained["export"], base / str(first))
    want = {first: trained["want"], first + 1: second[1]}
    second = second[0]
    rows = {k: v[:8] for k, v in trained["rows"].items()}
    server = _server(base, poll_secs=0.2, enable_batching=True, max_batch_size=8, batch_timeout_micros=2000)
    stop, answers, failures = threading.Event(), [], []

    def load(i):
        stub = _stub(server.port)
        while not stop.is_set():
            try:
                got = stub.Predict(_request(rows), timeout=30)
                answers.append((i, got.model_spec.version.value, tf.make_ndarray(got.outputs["probabilities"])))
            except grpc.RpcError as e:
                failures.append(e)
    threads = [threading.Thread(target=load, args=(i,)) for i in range(6)]
    try:
        for t in threads:
            t.start()

        def answered(version, n):   # every client has n answers of `version` (or failures end the wait)
            counts = collections.Counter(i for i, v, _ in list(answers) if v == version)
            return failures or (len(counts) == len(threads) and min(counts.values()) >= n)
        _wait_for(lambda: answered(first, 3), "every client answered by the first version")
        shutil.copytree(second, base / ".incoming")
        os.rename(base / ".incoming", base / str(first + 1))
        _wait_for(lambda: answered(first + 1, 3), "every client answered by the new version")
        stop.set()
        for t in threads:
            t.join()
        assert list(server.store.loaded()) == [first + 1]
    finally:
        stop.set()
        server.stop()
    assert not failures, failures[:3]
    versions = [v for _, v, _ in answers]
    assert versions[0] == first and versions[-1] == first + 1 and server.store.swaps == 2
    for _, version, got in answers:
        np.testing.assert_allclose(got, want[version][:8], rtol=1e-5, atol=1e-6)


def test_a_retired_version_is_freed_when_its_last_request_ends(trained, tmp_path):
    """The version a swap retires is closed and garbage-collected by the poll that retired it (a
    graph and session are otherwise freed only when Python's cycle collector happens to run); one
    with a request in flight stays until that request ends, then goes at the next poll."""
    import weakref
    from tfps.serving.store import ModelStore
    first = int(os.path.basename(trained["export"]))
    shutil.copytree(trained["export"], tmp_path / str(first))
    store = ModelStore("demo", str(tmp_path), printer=lambda *a, **k: None)
    try:
        store.poll()
        old = weakref.ref(store.loaded()[first].graph)   # ops and graph point at each other
        shutil.copytree(trained["export"], tmp_path / str(first + 1))
        store.poll()
        assert list(store.loaded()) == [first + 1] and old() is None
        busy = store.loaded()[first + 1]
        assert busy.acquire()   # a request in flight
        old = weakref.ref(busy.graph)
        shutil.copytree(trained["export"], tmp_path / str(first + 2))
        store.poll()
        assert list(store.loaded()) == [first + 2] and old() is not None and not busy.closed
        busy.release()
        busy = None
        store.poll()
        assert old() is None
    finally:
        store.close()


def test_100_version_swaps_under_load_leave_the_servers_memory_flat(trained, tmp_path):
    """In a process of its own (tests/serve_swaps.py): 100 versions swapped in one after the other
    under 2 client threads through the batcher (its threads must not keep a retired version), each
    retired and its directory removed. RSS after
    the 100th swap is within 10% of its level after the 10th; no request failed and every answer
    is the trained model's scores (each version is a copy of one export)."""
    np.savez(tmp_path / "rows.npz", **{k: v[:8] for k, v in trained["rows"].items()})
    np.save(tmp_path / "want.npy", trained["want"][:8])
    base = tmp_path / "versions"
    base.mkdir()
    out = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "serve_swaps.py"), "--batching",
                          trained["export"], str(tmp_path / "rows.npz"), str(tmp_path / "want.npy"), str(base), "100"],
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(__file__)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["swaps"] == 101 and len(run["rss_kib"]) == 100, run
    assert run["failed"] == 0 and run["wrong"] == 0 and run["requests"] > 100, run
    assert run["versions"] > 10, run   # the clients were served across the swaps, not by one version
    rss = run["rss_kib"]
    assert rss[99] <= 1.10 * rss[9], (rss[9], rss[99], rss)


def test_tfps_serve_cli_prints_its_ports_and_stops_on_sigterm(trained):
    proc = subprocess.Popen([sys.executable, "-m", "tfps.cli", "serve", "--model_base_path",
                             os.path.dirname(trained["export"]), "--model_name", "demo", "--port", "0",
                             "--rest_api_port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ports = json.loads(proc.stdout.readline())
        stub = _stub(ports["grpc_port"])
        got = stub.Predict(_request(trained["rows"]), timeout=60)
        np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), trained["want"], rtol=1e-5,
                                   atol=1e-6)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]


def test_tfps_serve_refuses_a_base_path_that_is_not_there(tmp_path, cli):
    code, _, err = cli("serve", "--model_base_path", str(tmp_path / "none"), "--model_name", "demo")
    assert code == 1 and "--model_base_path" in err
    code, _, err = cli("serve", "--model_config_file", str(tmp_path / "none.config"))
    assert code == 1 and "--model_config_file" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("flag, kwargs", [
    ("--grpc_threads", {"grpc_threads": 0}), ("--tensorflow_session_parallelism", {"session_threads": -1}),
    ("--batch_timeout_micros", {"batch_timeout_micros": -1}), ("--num_versions", {"num_versions": 0}),
    ("--grace_secs", {"grace_secs": float("inf")}), ("--grace_secs", {"grace_secs": 1e10}),
    ("--grace_secs", {"grace_secs": float("nan")}),
    ("--file_system_poll_wait_seconds", {"poll_secs": float("nan")}),
    ("--file_system_poll_wait_seconds", {"poll_secs": float("inf")}),
    ("--follow needs --file_system_poll_wait_seconds > 0", {"poll_secs": 0, "follow": "/tmp"})])
def test_settings_out_of_range_are_refused_by_flag(tmp_path, flag, kwargs):
    """Each is refused before anything listens, naming its flag: a grace or poll interval that is
    not a finite number of seconds up to a day (faulthandler's watchdog takes no more; a nan poll
    never polled again), and --follow without polls (it would never look at model_dir again)."""
    from tfps.serving.server import ModelServer
    with pytest.raises(ValueError, match=flag):
        ModelServer(ServeConfig(str(tmp_path), "demo", port=0, rest_api_port=None, **kwargs))
