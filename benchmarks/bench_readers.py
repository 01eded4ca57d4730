"""Reader throughput in one process against the training step rate of the demo model, measured in
the same run: the Criteo text reader (plain and gzip) and the TFRecord reader on the same rows
(written by tfps convert), and the MovieLens reader; batches of 1024, each read to the end. A reader must deliver at least
2x the examples/s the demo model trains at, so that it is never the bottleneck.
"""
import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402,F401  (quiet TF logs)

tf.compat.v1.disable_eager_execution()
from tfps.config import load_config  # noqa: E402
from tfps.data.convert import convert  # noqa: E402
from tfps.data.criteo import criteo_dataset  # noqa: E402
from tfps.data.movielens import movielens_dataset  # noqa: E402
from tfps.data.synthetic import SyntheticCriteo, write_criteo_text  # noqa: E402
from tfps.data.tfrecord import files_of, tfrecord_dataset  # noqa: E402
from tfps.runner.local import run  # noqa: E402


def examples_per_sec(make_dataset):
    """Examples/s of reading the whole dataset (its first batch excluded: graph start-up)."""
    with tf.Graph().as_default():
        features, labels = tf.compat.v1.data.make_one_shot_iterator(make_dataset()).get_next()
        n = tf.size(labels)
        with common.session() as s:
            s.run([features, n])
            total, t0 = 0, time.perf_counter()
            while True:
                try:
                    total += s.run([features, n])[1]
                except tf.errors.OutOfRangeError:
                    return total / (time.perf_counter() - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--steps", type=int, default=600, help="demo model steps timed")
    parser.add_argument("--movielens", default="../shared/data/movielens-small", help="a MovieLens directory")
    args = parser.parse_args()
    d = tempfile.mkdtemp(prefix="tfps_readers_")
    cfg = load_config("configs/demo.yaml", [f"train.steps={args.steps}", "eval.examples=4096",
                                            f"train.log_every_steps={args.steps // 6}"])
    gen = SyntheticCriteo(cfg.data)
    plain, zipped = os.path.join(d, "day.txt"), os.path.join(d, "day.txt.gz")
    write_criteo_text(gen, plain, args.rows)
    write_criteo_text(gen, zipped, args.rows)
    convert("criteo", plain, os.path.join(d, "rec"), printer=lambda *a, **k: None)
    specs = [{"name": "dense", "type": "float", "length": 13}, {"name": "ids", "type": "int", "length": 39}]
    rates = {
        "criteo_text": examples_per_sec(lambda: criteo_dataset([plain], 1024)),
        "criteo_gzip": examples_per_sec(lambda: criteo_dataset([zipped], 1024)),
        "tfrecord": examples_per_sec(lambda: tfrecord_dataset(files_of(os.path.join(d, "rec")), 1024, specs)),
    }
    if os.path.isdir(args.movielens):   # five passes over the training split (its load in the first batch)
        rates["movielens"] = examples_per_sec(lambda: movielens_dataset(args.movielens, 1024).repeat(5))
    step = run(dataclasses.replace(cfg, model_dir=os.path.join(d, "model")), printer=lambda *a, **k: None)
    step_rate = step["examples_per_sec"]
    for name, rate in rates.items():
        print(f"{name:12s} {rate:9.0f} examples/s = {rate / step_rate:.2f}x the demo model's training rate "
              f"({step_rate:.0f} examples/s, one process)", flush=True)
    print(json.dumps({"reader_examples_per_sec": {k: round(v) for k, v in rates.items()},
                      "demo_train_examples_per_sec": round(step_rate),
                      "ratios": {k: round(v / step_rate, 2) for k, v in rates.items()}}), flush=True)
    return 0 if min(rates.values()) >= 2 * step_rate else 1


if __name__ == "__main__":
    sys.exit(main())
