"""model.hashing_trick, the hashing-trick baseline benchmarks/scaling_model.py measures tfps against:
each feature a tf.Variable in model.num_shards partitions, tf.nn.embedding_lookup of id mod
model.hashing_buckets, TensorFlow's own optimizer. Oracles: the checkpoint's variables (the shapes
the config names, TensorFlow's Adam slots, no tfps table); the export, served by tfps serve's
Servable, against tfps.runner.predict on the same rows; the refusals name the key."""
import json

import numpy as np
import pytest
import tensorflow as tf

from tfps.config import ConfigError, load_config
from tfps.data import SyntheticCriteo
from tfps.data.sources import eval_set
from tfps.runner.job import export, predict

# 8 categorical features, not the demo's 26: each is a partitioned variable with 2 Adam slots, and
# 26 cost a step ~90 ms and most of the test's CPU. (The runs are seeded: AUC 0.588 after 30 steps
# with 8, 0.671 with 26.)
SETS = ["model.hashing_trick=true", "model.hashing_buckets=512", "model.num_shards=3", "train.optimizer=adam",
        "train.learning_rate=0.01", "train.steps=30", "train.batch_size=64", "model.hidden_units=[8]",
        "eval.examples=512", "data.vocab_max=3000", "data.num_categorical=8"]


def test_the_stock_baseline_trains_partitioned_variables_and_its_export_serves(tmp_path, cli):
    sets = SETS + [f"model_dir={tmp_path / 'model'}"]
    code, out, err = cli("train", "--config", "configs/demo.yaml", *[a for s in sets for a in ("--set", s)])
    assert code == 0, err[-3000:]
    assert 0.5 < json.loads(out.strip().splitlines()[-1])["auc"] <= 1
    cfg = load_config("configs/demo.yaml", sets)
    ckpt = tf.train.latest_checkpoint(str(tmp_path / "model"))
    shapes = dict(tf.train.list_variables(ckpt))
    width = cfg.model.embedding_dim + 1   # deepfm: each row carries its first-order weight
    for f in range(1, cfg.data.num_categorical + 1):   # saved whole: the 3 partitions are slices of one
        assert shapes[f"stock_embedding/C{f}"] == [512, width], f
        assert shapes[f"stock_embedding/C{f}/Adam"] == shapes[f"stock_embedding/C{f}/Adam_1"] == [512, width]
    assert not [n for n in shapes if n.endswith("-keys")]   # no tfps table
    features, _, _ = eval_set(SyntheticCriteo(cfg.data), 96, 96)
    want = np.concatenate([p["probabilities"] for p in predict(
        cfg, lambda: tf.data.Dataset.from_tensor_slices(features).batch(96))])
    from tfps.serving.servable import Servable
    servable = Servable(export(cfg, str(tmp_path / "export")), 1)
    try:
        signature = servable.signature(None)
        got = servable.run(signature, signature.check(features))["probabilities"]
    finally:
        servable.retire()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # TensorFlow's optimizer is part of the model's fingerprint: another learning rate is refused.
    code, _, err = cli("train", "--config", "configs/demo.yaml", *[a for s in sets for a in ("--set", s)],
                       "--set", "train.steps=40", "--set", "train.learning_rate=0.02")
    assert code == 2, err[-3000:]
    assert tf.train.latest_checkpoint(str(tmp_path / "model")) == ckpt   # nothing trained


@pytest.mark.parametrize("change, match", [
    (["pipeline.enabled=true"], "model.hashing_trick has no tfps table"),
    (["train.delta_every_secs=1"], "model.hashing_trick has no tfps table"),
    (["model.admit_min_count=2"], "model.hashing_trick has no tfps table"),
    (["model.hashing_buckets=0"], r"model.hashing_buckets must be in \[1, 536870912\]"),
    (["model.hashing_buckets=536870912"], r"model.hashing_buckets \(536870912\) x \(model.embedding_dim \+ 1\)"),
])
def test_what_the_stock_baseline_cannot_do_is_refused_naming_the_key(change, match):
    with pytest.raises(ConfigError, match=match):
        load_config("configs/demo.yaml", ["model.hashing_trick=true"] + change)
    if "hashing_buckets" not in change[0]:   # (hashing_buckets alone is refused: the next test)
        load_config("configs/demo.yaml", change)   # the same setting without hashing_trick is fine


def test_hashing_buckets_without_the_stock_baseline_is_refused():
    with pytest.raises(ConfigError, match="model.hashing_buckets applies with model.hashing_trick: true"):
        load_config("configs/demo.yaml", ["model.hashing_buckets=1024"])


def test_the_stock_baseline_of_mtgr_is_refused():
    with pytest.raises(ConfigError, match="model.hashing_trick is a baseline of deepfm, wdl and dcn_v2, not mtgr"):
        load_config("configs/movielens_mtgr.yaml", ["model.hashing_trick=true", "data.path=/nonexistent"])


def test_the_old_names_of_the_baseline_are_read_as_the_new_with_a_warning(tmp_path):
    """model.stock_tf and model.stock_buckets (the names before hashing_trick and hashing_buckets)
    give the same config, each with a FutureWarning naming the new key, in a file or a --set; a
    --set of the new name overrides the old one of the file; a file giving both names is refused."""
    with pytest.warns(FutureWarning) as caught:
        old = load_config("configs/demo.yaml", ["model.stock_tf=true", "model.stock_buckets=512"])
    assert sorted(str(w.message) for w in caught) == [
        "config: --set model.stock_buckets is now model.hashing_buckets (read as such)",
        "config: --set model.stock_tf is now model.hashing_trick (read as such)"]
    assert old == load_config("configs/demo.yaml", ["model.hashing_trick=true", "model.hashing_buckets=512"])
    text = open("configs/demo.yaml").read().replace("  merge_tables: true\n",
                                                     "  merge_tables: true\n  stock_tf: true\n  stock_buckets: 512\n")
    (tmp_path / "old.yaml").write_text(text)
    with pytest.warns(FutureWarning) as caught:
        assert load_config(str(tmp_path / "old.yaml")) == old
    assert sorted(str(w.message).split(": ", 1)[1] for w in caught) == [
        "model.stock_buckets is now model.hashing_buckets (read as such)",
        "model.stock_tf is now model.hashing_trick (read as such)"]
    assert all(str(w.message).startswith(f"config {tmp_path / 'old.yaml'}: ") for w in caught)
    with pytest.warns(FutureWarning):
        changed = load_config(str(tmp_path / "old.yaml"), ["model.hashing_buckets=1024"])
    assert (changed.model.hashing_trick, changed.model.hashing_buckets) == (True, 1024)
    (tmp_path / "both.yaml").write_text(text.replace("  stock_tf: true\n",
                                                     "  stock_tf: true\n  hashing_trick: true\n"))
    with pytest.raises(ConfigError, match="gives both model.stock_tf and model.hashing_trick"):
        load_config(str(tmp_path / "both.yaml"))
