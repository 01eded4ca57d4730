"""Serving export: a fresh process that runs only `import tfps` and loads the SavedModel gets
estimator.predict's numbers; unknown ids read as their default; serving never inserts."""
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfps.config import load_config
from tfps.data import SyntheticCriteo
from tfps.data.sources import eval_set, train_input_fn
from tfps.models.zoo import model_fn
from tfps.runner import train
from tfps.runner.job import export, params_of, predict, settings_of

pytestmark = pytest.mark.slow

LOADER = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tfps  # registers the ops; nothing else
tf.compat.v1.disable_eager_execution()
path, inputs = sys.argv[1], np.load(sys.argv[2])
with tf.compat.v1.Session(graph=tf.Graph()) as s:
    meta = tf.compat.v1.saved_model.loader.load(s, ["serve"], path)
    sig = meta.signature_def["serving_default"]
    feed = {sig.inputs["dense"].name: inputs["dense"], sig.inputs["ids"].name: inputs["ids"]}
    first = s.run(sig.outputs["probabilities"].name, feed)
    again = s.run(sig.outputs["probabilities"].name, feed)
np.save(sys.argv[3], np.stack([first, again]))
print(json.dumps({"ok": True}))
"""


def score_saved_model(path, inputs):
    """LOADER's scores, in this process: the SavedModel loaded into a graph of its own (the suite
    checks a fresh process once, in test_saved_model_in_a_fresh_process_matches_predict)."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        meta = tf.compat.v1.saved_model.loader.load(s, ["serve"], path)
        sig = meta.signature_def["serving_default"]
        feed = {sig.inputs["dense"].name: inputs["dense"], sig.inputs["ids"].name: inputs["ids"]}
        return s.run(sig.outputs["probabilities"].name, feed)


def test_saved_model_in_a_fresh_process_matches_predict(tmp_path):
    cfg = load_config("configs/demo.yaml", ["train.steps=40", "train.batch_size=128", "model.hidden_units=[16]",
                                            "data.vocab_max=3000", f"model_dir={tmp_path / 'model'}"])
    gen = SyntheticCriteo(cfg.data)
    train(model_fn, params_of(cfg), train_input_fn(gen, cfg.train.batch_size), settings_of(cfg), cfg.train.steps,
          printer=lambda *a, **k: None)
    features, _, _ = eval_set(gen, 256, 256)
    features = {k: v.copy() for k, v in features.items()}
    features["ids"][:64, :] = np.arange(64 * 26).reshape(64, 26) + 2**45  # ids never seen
    path = export(cfg, str(tmp_path / "export"))
    want = np.concatenate([p["probabilities"] for p in predict(
        cfg, lambda: tf.data.Dataset.from_tensor_slices(features).batch(256))])
    np.savez(tmp_path / "inputs.npz", **features)
    out = subprocess.run([sys.executable, "-c", LOADER, path, str(tmp_path / "inputs.npz"),
                          str(tmp_path / "out.npy")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[0], got[1])   # serving did not change the tables
    assert got[0][:64].std() > 0                     # unknown ids still give (default-row) scores


def test_export_cli_needs_a_checkpoint(tmp_path, cli):
    code, _, err = cli("export", "--config", "configs/demo.yaml", "--set", f"model_dir={tmp_path}", "--export-dir",
                       str(tmp_path / "x"))
    assert code == 2 and "no checkpoint in model_dir" in err
