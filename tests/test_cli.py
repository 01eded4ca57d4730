"""`tfps train` end to end in a subprocess: progress logs, then a final JSON metrics line."""
import json
import subprocess
import sys

import numpy as np
import pytest

from tfps.config import load_config
from tfps.data import SyntheticCriteo, auc
from tfps.data.sources import eval_set

pytestmark = pytest.mark.slow


def test_train_prints_final_json(tmp_path):
    sets = ["train.steps=150", "train.batch_size=256", "train.log_every_steps=50", "eval.examples=4000",
            "model.hidden_units=[32]", f"model_dir={tmp_path}"]
    out = subprocess.run([sys.executable, "-m", "tfps.cli", "train", "--config", "configs/demo.yaml"] +
                         [a for s in sets for a in ("--set", s)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    metrics = json.loads(lines[-1])
    assert metrics["steps"] == 150 and metrics["examples_per_sec"] > 0
    # The oracle AUC is that of the planted probabilities on the same eval sample.
    cfg = load_config("configs/demo.yaml", sets)
    _, labels, prob = eval_set(SyntheticCriteo(cfg.data), cfg.eval.examples, cfg.eval.batch_size)
    assert abs(metrics["oracle_auc"] - auc(labels, prob)) < 1e-5
    # 150 steps learn something: better than chance, not better than the oracle.
    assert 0.55 < metrics["auc"] <= metrics["oracle_auc"]
    # ... and a logloss below that of predicting the base rate for every row.
    from tfps.metrics import logloss
    assert metrics["logloss"] < logloss(labels, np.full(len(labels), labels.mean()))
    assert (tmp_path / "checkpoint").exists()
    assert metrics["cpu_allocator"] == "bfc"   # train.cpu_allocator's default, as TensorFlow reports it


def test_the_configs_cpu_allocator_wins_over_the_environment(tmp_path, forker):
    """train.cpu_allocator=malloc with TF_CPU_ALLOCATOR_USE_BFC=true in the environment: the run
    uses malloc (oracle: the allocator TensorFlow names in a traced step's memory records)."""
    sets = ["train.steps=3", "train.batch_size=64", "eval.examples=256", "model.hidden_units=[8]",
            "train.cpu_allocator=malloc", f"model_dir={tmp_path / 'model'}"]
    out = forker.run(["train", "--config", "configs/demo.yaml", *[a for s in sets for a in ("--set", s)]],
                     tmp_path / "run", timeout=300, env={"TF_CPU_ALLOCATOR_USE_BFC": "true"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["cpu_allocator"] == "malloc"


def test_bad_override_exits_with_named_error(cli):
    code, _, err = cli("train", "--config", "configs/demo.yaml", "--set", "train.nope=1")
    assert code == 2
    assert "unknown config key 'train.nope'" in err


def test_a_damaged_or_mismatched_checkpoint_is_one_line(tmp_path, cli):
    """A truncated checkpoint, and a resume with another optimizer: one line each, exit 2."""
    base = ["train.batch_size=128", "eval.examples=2000", "model.hidden_units=[8]", "data.vocab_max=2000",
            f"model_dir={tmp_path}"]

    def train(*sets):
        return cli("train", "--config", "configs/demo.yaml", *[a for s in base + list(sets) for a in ("--set", s)])
    assert train("train.steps=20")[0] == 0
    code, _, err = train("train.steps=40", "train.optimizer=adam")      # no Adam slots in the checkpoint
    assert code == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
    for data in tmp_path.glob("model.ckpt-20.data-*"):
        data.write_bytes(data.read_bytes()[:100])
    code, _, err = train("train.steps=40")
    assert code == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
    code, _, err = cli("inspect", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err[-2000:]


def test_the_cli_runs_numpy_blas_on_one_thread():
    # Oracle: threadpoolctl's own report of the loaded BLAS libraries.
    from threadpoolctl import threadpool_info
    from tfps.process import single_threaded_blas
    limits = single_threaded_blas()
    try:
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert blas and all(lib["num_threads"] == 1 for lib in blas)
    finally:
        limits.restore_original_limits()
