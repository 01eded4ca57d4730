"""`tfps launch`: real PS/worker processes on loopback (small config, bounded time)."""
import json
import subprocess
import sys

import tensorflow as tf

from tfps.cluster.launch import cluster_spec


def test_two_ps_two_workers_train_and_checkpoint_every_shard(tmp_path):
    sets = ["train.steps=120", "train.batch_size=256", "train.log_every_steps=40", "eval.examples=2000",
            "model.hidden_units=[16]", "data.vocab_max=5000", "train.save_checkpoints_steps=60",
            f"model_dir={tmp_path}"]
    out = subprocess.run([sys.executable, "-m", "tfps.cli", "launch", "--config", "configs/demo.yaml",
                          "--ps", "2", "--workers", "2"] + [a for s in sets for a in ("--set", s)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = json.loads(out.stdout.strip().splitlines()[-1])
    assert metrics["task"] == "chief:0" and metrics["cluster"] == {"chief": 1, "ps": 2, "worker": 1}
    assert 0.5 < metrics["auc"] <= metrics["oracle_auc"]
    # The checkpoint holds every shard of the merged table (one per PS), with rows in each.
    ckpt = tf.train.latest_checkpoint(str(tmp_path))
    assert int(ckpt.rsplit("-", 1)[1]) >= 120   # async workers may overshoot by a step or two
    keys = {n: s for n, s in tf.train.list_variables(ckpt) if n.endswith("-keys")}
    assert len(keys) == 2 and all(s[0] > 0 for s in keys.values())
    for task in ("ps0", "ps1", "chief0", "worker0"):
        assert (tmp_path / "logs" / f"{task}.log").exists()


def test_bad_launches_fail_clearly(tmp_path):
    for args, message in ((["--ps", "0"], "--ps must be >= 1"),
                          (["--protocol", "grpc+verbs"], "needs a TensorFlow build with that transport"),
                          (["--set", "train.nope=1"], "unknown config key 'train.nope'")):
        out = subprocess.run([sys.executable, "-m", "tfps.cli", "launch", "--config", "configs/demo.yaml"] + args,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr[-2000:])


def test_cluster_spec_uses_distinct_free_ports():
    spec = cluster_spec(2, 3)
    addresses = spec["chief"] + spec["ps"] + spec["worker"]
    assert len(set(addresses)) == 5 and len(spec["worker"]) == 2 and len(spec["ps"]) == 2
