"""The pipeline along the whole flow: `tfps launch` with pipeline.enabled, a PS killed mid-pipeline,
export and serving (real processes; slow). Its AUC against the plain step: benchmarks/smoke."""
import json
import signal

import numpy as np
import pytest

from test_launch import SMALL, _checkpoint_steps, _kill, _launch, _wait_for

pytestmark = pytest.mark.slow


def test_a_pipelined_cluster_survives_a_killed_ps_and_serves_what_it_trained(tmp_path, cli, forker):
    from tfps.config import load_config
    from tfps.data import SyntheticCriteo
    from tfps.data.sources import eval_set
    from tfps.data.synthetic import auc
    sets = ["train.steps=1000", "train.save_checkpoints_steps=200", "pipeline.enabled=true", "pipeline.depth=2"]
    job = _launch(tmp_path, sets, "--max-restarts", "2", forker=forker)
    try:
        saved = _wait_for(lambda: [s for s in _checkpoint_steps(tmp_path) if s >= 200], "a checkpoint past step 200")
        _kill(tmp_path, "ps1")
        _wait_for(lambda: [s for s in _checkpoint_steps(tmp_path) if s >= saved[-1] + 400], "training to go on")
        out, err = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 0, out[-3000:] + err[-3000:]
    metrics = json.loads(out.strip().splitlines()[-1])
    assert metrics["restarts"] == {"ps1": 1} and metrics["sessions"] >= 2
    assert metrics["tasks"]["worker0"]["local_steps"] > 0
    assert metrics["traffic_per_step"]["messages"] <= 14   # the bound for 2 PS (was 27-40)
    args = [a for s in SMALL + sets + [f"model_dir={tmp_path}"] for a in ("--set", s)]
    code, out, err = cli("export", "--config", "configs/demo.yaml", *args, "--export-dir", str(tmp_path / "export"))
    assert code == 0, err[-3000:]
    cfg = load_config("configs/demo.yaml", SMALL + sets)
    features, labels, _ = eval_set(SyntheticCriteo(cfg.data), cfg.eval.examples, cfg.eval.batch_size)
    # The chief scored the last checkpoint on the same sample: `tfps serve` on the export, through
    # a stock PredictionServiceStub, gives its AUC.
    import tensorflow as tf
    from serve_client import _request, _stub
    server = forker.start(["serve", "--model_base_path", str(tmp_path / "export"), "--model_name", "demo", "--port", "0",
                           "--rest_api_port", "0"], tmp_path / "serve.out", tmp_path / "serve.err")
    try:
        first = server.first_line()
        assert first.startswith("{"), (first, server.errors()[-3000:])
        port = json.loads(first)["grpc_port"]
        stub = _stub(port)
        served = np.concatenate([tf.make_ndarray(stub.Predict(_request({k: v[i:i + 4096] for k, v in features.items()}),
                                                              timeout=120).outputs["probabilities"])
                                 for i in range(0, len(labels), 4096)])
    finally:
        server.send_signal(signal.SIGTERM)
        stopped = server.wait(60)
        if stopped is None:
            server.kill()
    assert stopped == 0, server.errors()[-3000:]   # SIGTERM: a drained stop
    assert abs(auc(labels, served) - metrics["auc"]) < 1e-4, (auc(labels, served), metrics["auc"])
