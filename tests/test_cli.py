"""`tfps train` end to end in a subprocess: progress logs, then a final JSON metrics line."""
import json
import subprocess
import sys

import pytest

from tfps.config import load_config
from tfps.data import SyntheticCriteo, auc
from tfps.estimator.runner import eval_set

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
    assert any(line.startswith("step 100 loss") for line in lines)
    # The oracle AUC is that of the planted probabilities on the same eval sample.
    cfg = load_config("configs/demo.yaml", sets)
    _, labels, prob = eval_set(SyntheticCriteo(cfg.data), cfg.eval.examples, cfg.eval.batch_size)
    assert abs(metrics["oracle_auc"] - auc(labels, prob)) < 1e-5
    # 150 steps learn something: better than chance, not better than the oracle.
    assert 0.55 < metrics["auc"] <= metrics["oracle_auc"]
    assert (tmp_path / "checkpoint").exists()


def test_bad_override_exits_with_named_error():
    out = subprocess.run([sys.executable, "-m", "tfps.cli", "train", "--config", "configs/demo.yaml",
                          "--set", "train.nope=1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "unknown config key 'train.nope'" in out.stderr
