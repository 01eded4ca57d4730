"""tfps.runner: the ModelSpec contract, and the runner's path (train, evaluate, export) touches no
tf.estimator -- what TensorFlow 2.16+ lacks."""
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from tfps.runner.graph import RunSettings, call_model_fn
from tfps.models.spec import ModeKeys, ModelSpec, SERVING_SIGNATURE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_spec_names_what_its_mode_lacks(graph):
    loss = tf.constant(1.0)
    with pytest.raises(ValueError, match="needs a train_op"):
        ModelSpec(ModeKeys.TRAIN, loss=loss).checked()
    with pytest.raises(ValueError, match="needs a loss"):
        ModelSpec(ModeKeys.EVAL).checked()
    with pytest.raises(ValueError, match="needs predictions"):
        ModelSpec(ModeKeys.PREDICT).checked()
    with pytest.raises(ValueError, match="mode 'fit'"):
        ModelSpec("fit", loss=loss).checked()
    spec = ModelSpec(ModeKeys.PREDICT, predictions={"p": loss}).checked()
    assert list(spec.export_outputs) == [SERVING_SIGNATURE]


def test_the_runner_takes_only_model_specs(graph):
    def estimator_like(features, labels, mode, params):
        return {"loss": tf.constant(0.0)}
    with pytest.raises(TypeError, match="ModelSpec"):
        call_model_fn(estimator_like, {}, None, ModeKeys.EVAL, {})

    def wrong_mode(features, labels, mode, params):
        return ModelSpec(ModeKeys.EVAL, loss=tf.constant(0.0))
    with pytest.raises(ValueError, match="asked for 'train'"):
        call_model_fn(wrong_mode, {}, None, ModeKeys.TRAIN, {})


def test_settings_refuse_two_checkpoint_frequencies():
    with pytest.raises(ValueError, match="not both"):
        RunSettings("/tmp/x", save_checkpoints_steps=10, save_checkpoints_secs=5)


def test_train_evaluate_export_import_no_tf_estimator(tmp_path):
    """`tfps train` and `tfps export` on a tiny model, in a process that fails any use of
    tf.estimator (TensorFlow 2.16+ has none): both work, and tensorflow_estimator is never imported."""
    code = f"""
import sys
import tensorflow as tf
class NoEstimator:
    def __getattr__(self, name):
        raise AttributeError("tf.estimator used on the runner's path: " + name)
tf.estimator = NoEstimator()
from tfps.cli import main
sets = ["--set", "model_dir={tmp_path}/m", "--set", "train.steps=20", "--set", "train.batch_size=64",
        "--set", "train.save_checkpoints_steps=10", "--set", "eval.examples=512", "--set", "model.hidden_units=[16]"]
assert main(["train", "--config", "configs/demo.yaml"] + sets) == 0
assert main(["export", "--config", "configs/demo.yaml", "--export-dir", "{tmp_path}/e"] + sets) == 0
print("ESTIMATOR", "tensorflow_estimator" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ESTIMATOR False" in out.stdout, out.stdout[-2000:]
    assert len(os.listdir(tmp_path / "e")) == 1
