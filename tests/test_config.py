"""tfps.config: YAML + --set overrides onto typed dataclasses; bad keys and values are named, and
no numeric value outside its range gets as far as a graph."""
import math
import re

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
    ("train.steps=0", r"train.steps must be in \[1, 4294967295\], got 0"),
    ("model.hidden_units=5", "'model.hidden_units' must be a list"),
    ("train.optimizer=adam9", "train.optimizer must be"),
    ("train.cpu_allocator=tcmalloc", "train.cpu_allocator must be one of bfc, malloc, got 'tcmalloc'"),
    ("train.steps", "expects key.sub=value"),
    ("train.steps.x=1", "'steps' is not a section"),
    ("train.save_checkpoints_secs=0", r"train.save_checkpoints_secs must be in \[1, 31536000\], got 0"),
    ("cluster.protocol=carrier-pigeon", "cluster.protocol must be grpc"),
    ("cluster.port=1", "unknown config key 'cluster.port'"),
    ("model.name=mtgr", "model.name mtgr reads data.format movielens_sequences"),
    ("data.format=movielens_sequences", "model.name mtgr reads data.format movielens_sequences"),
    ("model.heads=3", "must divide model.d_model"),
    ("model.d_model=0", r"model.d_model must be in \[1, 4096\], got 0"),
    ("model.heads=0", r"model.heads must be in \[1, 64\], got 0"),
    ("data.max_tokens=0", r"data.max_tokens must be in \[1, 4194304\], got 0"),
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
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(bytes(range(128, 256)) * 2)
    with pytest.raises(ConfigError, match=f"config {binary} is not text"):
        load_config(str(binary))


def test_checkpoints_by_steps_or_by_seconds():
    from tfps.runner.job import settings_of
    by_steps = settings_of(load_config("configs/demo.yaml", ["model_dir=/tmp/x"]))
    by_secs = settings_of(load_config("configs/demo.yaml", ["model_dir=/tmp/x", "train.save_checkpoints_secs=30"]))
    assert (by_steps.save_checkpoints_steps, by_steps.save_checkpoints_secs) == (1500, None)
    assert (by_secs.save_checkpoints_steps, by_secs.save_checkpoints_secs) == (None, 30)


@pytest.mark.estimator
def test_an_estimators_run_config_saves_as_the_runner():
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
    ("train.adam.beta1=1.0", r"train.adam.beta1 must be in \[0, 1\), got 1.0"),
    ("train.ftrl.beta=-1", r"train.ftrl.beta must be in \[0, 3.40282e\+38\], got -1.0"),
    ("model.admit_sketch_width=5000", "power of two"),
    ("model.admit_sketch_width=1000", r"model.admit_sketch_width must be in \[4096, 67108864\], got 1000"),
    ("cluster.peer_timeout_secs=0", r"cluster.peer_timeout_secs must be in \(0, 31536000\], got 0.0"),
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


# -- every numeric field is bounded (tfps.config.BOUNDS): a config fuzz

FUZZ = {"0": 0, "-1": -1, str(2**31): 2**31, str(2**63): 2**63, ".nan": float("nan"), "1.0e+308": 1e308}
# what a field needs beside it for an in-range value to be a valid config
CONTEXT = {"train.evict_every_steps": ["model.eviction.after_steps=10"],
           "eval.examples": ["data.format=criteo", "data.path=x", "data.eval_path=y"],
           "model.hashing_buckets": ["model.hashing_trick=true", "model.embedding_dim=1"]}


def _override(field, text):
    if field == "data.features.length":
        return ["data.format=tfrecord", "data.path=x", f"data.features=[{{name: x, type: int, length: {text}}}]"]
    if field == "model.hidden_units":
        return [f"{field}=[{text}]"]
    context = CONTEXT.get(field, ["train.evict_every_steps=10"] if field.startswith("model.eviction.") else [])
    return context + [f"{field}={text}"]


def _shown(field):
    """The name the error gives the field set by _override."""
    return {"data.features.length": "data.features[0].length", "model.hidden_units": "model.hidden_units[0]"}.get(
        field, field)


def test_every_numeric_field_has_a_finite_range():
    from tfps.config import BOUNDS, numeric_fields
    fields = dict(numeric_fields())
    assert set(fields) == set(BOUNDS) and len(fields) > 50
    for field, allowed in BOUNDS.items():   # ints fit int64; floats are finite float32s
        assert math.isfinite(allowed.lo) and math.isfinite(allowed.hi), field
        assert allowed.hi < 2**63 if fields[field] is int else -3.5e38 < allowed.lo <= allowed.hi < 3.5e38, field


@pytest.mark.parametrize("field", [f for f, _ in __import__("tfps.config", fromlist=["x"]).numeric_fields()])
def test_each_numeric_field_refuses_what_is_out_of_its_range(field):
    """0, -1, 2^31, 2^63, NaN and 1e308: a ConfigError naming the field and its range, or (in the
    range) a config that validates. Oracle: the range in BOUNDS, and the field's type."""
    from tfps.config import BOUNDS, numeric_fields
    kind, allowed = dict(numeric_fields())[field], BOUNDS[field]
    for text, value in FUZZ.items():
        fits = (kind is float or isinstance(value, int)) and value in allowed
        if fits:
            cfg = load_config("configs/demo.yaml", _override(field, text))
            assert all(v == value for _, v in __import__("tfps.config", fromlist=["x"])._values(cfg, field))
            continue
        with pytest.raises(ConfigError) as err:
            load_config("configs/demo.yaml", _override(field, text))
        message = str(err.value)
        assert message.startswith(f"{_shown(field)} must be in {allowed}, got ") if kind is float or isinstance(
            value, int) else f"'{_shown(field)}' must be int" in message, (field, text, message)


def test_embedding_dims_stop_where_the_tables_rows_do():
    """The table's limit (kernels/core/config.h kMaxDim) less the first-order column deepfm and
    wdl add; the sketch widths are the table's too."""
    from tfps.config import MAX_DIM, MAX_SKETCH_WIDTH, MIN_SKETCH_WIDTH
    header = open("kernels/core/config.h").read()
    for name, value in (("kMaxDim", MAX_DIM), ("kMaxSketchWidth", MAX_SKETCH_WIDTH),
                        ("kMinSketchWidth", MIN_SKETCH_WIDTH)):
        assert 1 << int(re.search(rf"{name} = int64_t\{{1\}} << (\d+);", header).group(1)) == value, name
    assert load_config("configs/demo.yaml", [f"model.embedding_dim={MAX_DIM - 1}"]).model.embedding_dim == MAX_DIM - 1
    with pytest.raises(ConfigError, match=r"model.embedding_dim must be in \[1, 16777215\], got 16777216"):
        load_config("configs/demo.yaml", [f"model.embedding_dim={MAX_DIM}"])
    with pytest.raises(ConfigError, match=r"model.num_shards must be in \[1, 1024\], got 70000"):
        load_config("configs/demo.yaml", ["model.num_shards=70000"])


@pytest.mark.slow
def test_accepted_extremes_train_a_step_without_a_signal(tmp_path, forker):
    """The largest embedding_dim (its rows 64 MiB) and the zeros that are allowed train one step and
    evaluate, each `tfps train` a process of its own (a fork with TensorFlow imported): an exit
    code, never a signal (a negative code). Tiny shapes keep the memory small."""
    import ml_tiny
    (tmp_path / "ml").mkdir()
    movielens = ml_tiny.write_planted(tmp_path / "ml")
    from tfps.config import MAX_DIM
    runs = [
        ["configs/demo.yaml", f"model.embedding_dim={MAX_DIM - 1}", "model.name=wdl", "model.hidden_units=[1]",
         "data.num_categorical=1", "data.num_interacting=1", "data.num_dense=0", "train.batch_size=1",
         "eval.examples=4", "eval.batch_size=4"],
        ["configs/demo.yaml", "model.name=dcn_v2", "model.cross_layers=0", "model.hidden_units=[4]",
         "data.factor_dim=0", "data.num_interacting=0", "train.keep_checkpoint_max=0", "train.batch_size=16",
         "eval.examples=256", "eval.throttle_secs=0", "model.eviction.after_steps=0", "train.evict_every_steps=1"],
        ["configs/movielens_mtgr.yaml", "model.blocks=0", "data.history_len=0", "data.realtime_len=0",
         "data.window=1", f"data.path={movielens}", "eval.examples=64"],
    ]
    for i, (config, *sets) in enumerate(runs):
        sets += ["train.steps=1", f"model_dir={tmp_path}/m{i}"]
        out = forker.run(["train", "--config", config] + [a for s in sets for a in ("--set", s)], tmp_path / f"m{i}",
                         timeout=300)
        assert out.returncode == 0, (config, out.returncode, out.stderr[-3000:])   # a signal is a negative code


@pytest.mark.parametrize("field", ["train.learning_rate", "train.adam.epsilon", "train.adagrad.initial_accumulator_value",
                                   "train.ftrl.initial_accumulator_value"])
def test_a_positive_hyper_parameter_that_float32_makes_zero_is_refused(field):
    import numpy as np
    for tiny in (1e-46, 1e-300):
        assert np.float32(tiny) == 0
        with pytest.raises(ConfigError, match=re.escape(field)):
            load_config("configs/demo.yaml", [f"{field}={tiny}"])
    load_config("configs/demo.yaml", [f"{field}={float(np.finfo(np.float32).tiny)}"])   # the smallest normal is fine


def test_a_config_files_data_paths_are_relative_to_it_and_set_ones_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ml.yaml").write_text("data:\n  format: movielens\n  path: ../data/ml\n")
    (tmp_path / "conf" / "cr.yaml").write_text("data:\n  format: criteo\n  path: day_*.gz\n"
                                               "  eval_path: /abs/eval.txt\n")
    monkeypatch.chdir(tmp_path / "conf")
    assert load_config("ml.yaml").data.path == str(tmp_path / "data" / "ml")
    cfg = load_config(str(tmp_path / "conf" / "cr.yaml"))
    assert (cfg.data.path, cfg.data.eval_path) == (str(tmp_path / "conf" / "day_*.gz"), "/abs/eval.txt")
    assert load_config("ml.yaml", ["data.path=here"]).data.path == "here"
    assert load_config("ml.yaml", ["data.path=gs://b/ml"]).data.path == "gs://b/ml"
