"""Real-data flows end to end: every shipped config trains from `tfps train` (in this process);
malformed rows are counted in the final JSON or stop the run with a named line; MovieLens on a
local cluster, then export, then the SavedModel in a fresh process scores what the chief scored."""
import json
import subprocess
import sys

import numpy as np
import pytest

import ml_tiny
from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, write_criteo_text

pytestmark = pytest.mark.slow
SMALL = ["train.steps=20", "train.batch_size=128", "model.hidden_units=[16]", "train.log_every_steps=10",
         "eval.batch_size=512"]


def _sets(items):
    return [a for s in items for a in ("--set", s)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    ml_tiny.write_criteo(d, "train.txt.gz", 3000, "eval.txt", 1000)
    (d / "ml").mkdir()
    ml_tiny.write_larger(d / "ml")
    return d


@pytest.mark.parametrize("name", ["criteo_deepfm", "criteo_dcn", "movielens_deepfm", "movielens_wdl", "movielens_dcn"])
def test_every_shipped_config_trains_and_reports_its_metrics(data, tmp_path, name, cli):
    paths = ([f"data.path={data / 'train.txt.gz'}", f"data.eval_path={data / 'eval.txt'}"] if name.startswith("criteo")
             else [f"data.path={data / 'ml'}"])
    code, out, err = cli("train", "--config", f"configs/{name}.yaml", *_sets(SMALL + paths + [f"model_dir={tmp_path}"]))
    assert code == 0, err[-3000:]
    metrics = json.loads(out.strip().splitlines()[-1])
    assert 0 < metrics["auc"] < 1 and metrics["logloss"] > 0 and metrics["bad_rows"] == 0
    assert (metrics["gauc"] is not None) == name.startswith("movielens")
    assert metrics["eval_examples"] == (1000 if name.startswith("criteo") else
                                        sum(1 for v in ml_tiny.expected(*ml_tiny.larger()).values() if v[0] == "eval"))


def test_malformed_rows_are_counted_in_the_json_or_stop_the_run_naming_the_line(tmp_path, cli):
    lines = (tmp_path / "clean.txt")
    write_criteo_text(SyntheticCriteo(SyntheticConfig()), str(lines), 600)
    rows = lines.read_text().splitlines()
    rows[150], rows[420] = "1\t2\t3", rows[420].replace("\t", "\tx", 1)          # two bad training rows
    (tmp_path / "train.txt").write_text("\n".join(rows) + "\n")
    (tmp_path / "eval.txt").write_text("\n".join(rows[:99] + ["label\t1"]) + "\n")   # one bad eval row
    base = ["data.format=criteo", f"data.path={tmp_path / 'train.txt'}", f"data.eval_path={tmp_path / 'eval.txt'}",
            "train.batch_size=100", "train.steps=6", "model.hidden_units=[8]", "eval.examples=null"]
    # six steps of 100 lines: exactly one pass over the training file
    code, out, err = cli("train", "--config", "configs/demo.yaml", *_sets(base + ["data.skip_bad_rows=true",
                                                                                f"model_dir={tmp_path / 'a'}"]))
    assert code == 0, err[-3000:]
    metrics = json.loads(out.strip().splitlines()[-1])
    assert (metrics["bad_rows"], metrics["bad_rows_eval"], metrics["eval_examples"]) == (3, 1, 99)
    code, _, err = cli("train", "--config", "configs/demo.yaml", *_sets(base + [f"model_dir={tmp_path / 'b'}"]))
    assert code == 2
    assert f"criteo: {tmp_path / 'train.txt'} line 151: has 3 tab-separated fields" in err
    assert len(err.strip().splitlines()) == 1, err[-2000:]


def test_movielens_on_a_cluster_then_export_then_a_fresh_process_scores_as_the_chief(data, tmp_path, cli, forker):
    model_dir = tmp_path / "model"
    sets = SMALL[1:] + ["train.steps=80", f"data.path={data / 'ml'}", f"model_dir={model_dir}"]
    # train.cpu_allocator=malloc (not the default) reaches every task: each trainer reports what
    # TensorFlow says its CPU allocator is (the launch test of the default: test_launch.py).
    out = forker.run(["launch", "--config", "configs/movielens_deepfm.yaml", "--ps", "2", "--workers", "2",
                      *_sets(sets + ["train.cpu_allocator=malloc"])], tmp_path / "launch", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    chief = json.loads(out.stdout.strip().splitlines()[-1])
    assert chief["steps"] == 80 and chief["gauc"] is not None
    assert {t: m.get("cpu_allocator") for t, m in chief["tasks"].items()} == {"chief0": "malloc", "worker0": "malloc"}
    code, exported, err = cli("export", "--config", "configs/movielens_deepfm.yaml", "--export-dir",
                              str(tmp_path / "export"), *_sets(sets))
    assert code == 0, err[-3000:]
    saved = json.loads(exported.strip().splitlines()[-1])["saved_model"]
    script = f"""
import json, sys
import numpy as np, tensorflow as tf
import tfps
from tfps.config import load_config
from tfps.data.sources import make_source
from tfps.metrics import auc, gauc, logloss
cfg = load_config("configs/movielens_deepfm.yaml", {sets!r})
model = tf.saved_model.load({saved!r})
serve = model.signatures["serving_default"]
labels, scores, users = [], [], []
for features, label in make_source(cfg).eval_input_fn(512)():
    out = serve(ids=features["ids"], dense=features["dense"], genres=features["genres"])
    scores.append(out["probabilities"].numpy()); labels.append(label.numpy()); users.append(features["user"].numpy())
labels, scores, users = map(np.concatenate, (labels, scores, users))
print(json.dumps({{"auc": auc(labels, scores), "gauc": gauc(users, labels, scores), "logloss": logloss(labels, scores)}}))
"""
    fresh = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    served = json.loads(fresh.stdout.strip().splitlines()[-1])
    for k in ("auc", "gauc", "logloss"):
        assert served[k] == pytest.approx(chief[k], abs=2e-5), k
    assert np.isfinite(served["auc"])
