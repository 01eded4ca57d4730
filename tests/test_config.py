"""tfps.config: YAML + --set overrides onto typed dataclasses; bad keys and values are named."""
import pytest

from tfps.config import ConfigError, load_config


def test_demo_config_and_overrides(tmp_path):
    cfg = load_config("configs/demo.yaml", ["train.steps=200", "model_dir=/tmp/x", "model.hidden_units=[8, 4]",
                                            "train.learning_rate=1"])
    assert cfg.train.steps == 200 and cfg.model_dir == "/tmp/x"
    assert cfg.model.hidden_units == [8, 4]
    assert cfg.train.learning_rate == 1.0 and isinstance(cfg.train.learning_rate, float)
    assert cfg.data.num_categorical == 26


@pytest.mark.parametrize("override,match", [
    ("train.stepz=5", "unknown config key 'train.stepz'"),
    ("nope=1", "unknown config key 'nope'"),
    ("train.steps=abc", "'train.steps' must be int"),
    ("train.steps=0", "train.steps must be > 0"),
    ("model.hidden_units=5", "'model.hidden_units' must be a list"),
    ("train.optimizer=adam9", "train.optimizer must be"),
    ("train.steps", "expects key.sub=value"),
    ("train.steps.x=1", "'steps' is not a section"),
    ("train.save_checkpoints_secs=0", "train.save_checkpoints_secs must be > 0"),
    ("cluster.protocol=carrier-pigeon", "cluster.protocol must be grpc"),
    ("cluster.port=1", "unknown config key 'cluster.port'"),
])
def test_bad_config_is_named(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/demo.yaml", [override])


def test_bad_yaml_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(p))
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(str(tmp_path / "missing.yaml"))


def test_checkpoints_by_steps_or_by_seconds():
    from tfps.estimator.runner import make_estimator
    by_steps = make_estimator(load_config("configs/demo.yaml", ["model_dir=/tmp/x"])).config
    by_secs = make_estimator(load_config("configs/demo.yaml", ["model_dir=/tmp/x",
                                                               "train.save_checkpoints_secs=30"])).config
    assert (by_steps.save_checkpoints_steps, by_steps.save_checkpoints_secs) == (1500, None)
    assert (by_secs.save_checkpoints_steps, by_secs.save_checkpoints_secs) == (None, 30)
