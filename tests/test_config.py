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
    ("model.name=mtgr", "model.name mtgr reads data.format movielens_sequences"),
    ("data.format=movielens_sequences", "model.name mtgr reads data.format movielens_sequences"),
    ("model.heads=3", "must divide model.d_model"),
    ("model.d_model=0", "model.d_model must be > 0"),
    ("model.heads=0", "model.heads must be > 0"),
    ("data.max_tokens=0", "data.max_tokens must be null or >= 1"),
    ("data.validation=true", "data.validation applies to the movielens and movielens_sequences formats"),
])
def test_bad_config_is_named(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/demo.yaml", [override])


def test_skipping_bad_rows_of_sequences_is_refused():
    with pytest.raises(ConfigError, match="data.skip_bad_rows is not supported with movielens_sequences"):
        load_config("configs/movielens_mtgr.yaml", ["data.skip_bad_rows=true"])


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


@pytest.mark.parametrize("override,match", [
    ("train.evict_every_steps=10", "model.eviction has no rule"),
    ("model.eviction.after_steps=10", "train.evict_every_steps is not set"),
    ("model.eviction.cap_policy=fifo", "cap_policy must be lfu or lru"),
    ("train.adam.beta1=1.0", "beta1 and train.adam.beta2 must be in"),
    ("train.ftrl.beta=-1", "must be >= 0"),
    ("model.admit_sketch_width=1000", "power of two"),
    ("cluster.peer_timeout_secs=0", "peer_timeout_secs must be > 0"),
    ("train.steps=[1, 2", "is not a YAML value"),
])
def test_policy_and_optimizer_settings_are_checked(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/demo.yaml", [override])


@pytest.mark.parametrize("name,sets,tf_class,attrs", [
    ("sgd", [], "GradientDescentOptimizer", {}),
    ("adagrad", ["train.adagrad.initial_accumulator_value=0.3"], "AdagradOptimizer",
     {"_initial_accumulator_value": 0.3}),
    ("adam", ["train.adam.beta1=0.8", "train.adam.beta2=0.9", "train.adam.epsilon=1e-6"], "AdamOptimizer",
     {"_beta1": 0.8, "_beta2": 0.9, "_epsilon": 1e-6}),
    ("ftrl", ["train.ftrl.l1_regularization_strength=0.01", "train.ftrl.beta=0.5",
              "train.ftrl.learning_rate_power=-0.6"], "FtrlOptimizer",
     {"_l1_regularization_strength": 0.01, "_beta": 0.5, "_learning_rate_power": -0.6}),
])
def test_every_optimizer_is_built_with_its_hyper_parameters(name, sets, tf_class, attrs):
    """The config builds the tfps optimizer, which is a subclass of TF's own, holding the values
    TF's constructor stored from the same arguments."""
    import dataclasses
    import tensorflow as tf
    from tfps.models.common import make_optimizer
    cfg = load_config("configs/demo.yaml", [f"train.optimizer={name}", "train.learning_rate=0.25"] + sets)
    opt = make_optimizer(dataclasses.asdict(cfg.train))
    assert isinstance(opt, getattr(tf.compat.v1.train, tf_class))
    kwargs = dataclasses.asdict(getattr(cfg.train, name)) if name != "sgd" else {}
    reference = getattr(tf.compat.v1.train, tf_class)(0.25, **kwargs)
    for attr, value in attrs.items():
        assert getattr(opt, attr) == pytest.approx(value) == getattr(reference, attr)
