"""Reader throughput in one process against the training step rate of the demo model, measured in
the same run: the Criteo text reader (plain and gzip) and the TFRecord reader on the same rows
(written by tfps convert), and the MovieLens reader; batches of 1024, each read to the end. A reader must deliver at least
2x the examples/s the demo model trains at, so that it is never the bottleneck. Each reader's CPU
per example (every thread of the process) is set against a floor: as many batches of the same
rows, already parsed and batched, handed out from memory by tf.data. The synthetic source (the demo's) is read as training reads it,
with the core's rank sampler and with numpy's searchsorted (the same rows).
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
from tfps.data.sources import make_source  # noqa: E402
from tfps.data.synthetic import SyntheticCriteo, write_criteo_text  # noqa: E402
from tfps.data.tfrecord import files_of, tfrecord_dataset  # noqa: E402
from tfps.runner.local import run  # noqa: E402


def read_cost(make_dataset, keep=False):
    """(examples/s, CPU microseconds per example: the process's, every thread) of reading the
    whole dataset (its first batch excluded: graph start-up); with keep, also the batches read
    ({name: array} of the features and labels, concatenated)."""
    with tf.Graph().as_default():
        features, labels = tf.compat.v1.data.make_one_shot_iterator(make_dataset()).get_next()
        n = tf.size(labels)
        kept = []
        with common.session() as s:
            s.run([features, n])
            total, t0, c0 = 0, time.perf_counter(), time.process_time()
            while True:
                try:
                    got = s.run([features, labels, n])
                except tf.errors.OutOfRangeError:
                    break
                total += got[2]
                if keep:
                    kept.append((got[0], got[1]))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = (total / wall, cpu / total * 1e6)
    if not keep:
        return out
    import numpy as np
    # The floor's rows: each feature of rows (a scalar per batch, or a list feature whose width
    # varies by batch, is left out of them).
    features = {k: [f[k] for f, _ in kept] for k in kept[0][0]}
    parsed = ({k: np.concatenate(v) for k, v in features.items()
               if all(a.ndim >= 1 and a.shape[1:] == v[0].shape[1:] for a in v)},
              np.concatenate([y for _, y in kept]))
    return out + (parsed,)


def floor_cost(parsed, batch=1024):
    """read_cost of as many batches of the same rows, already parsed and batched, from memory
    (the first batch, handed out again and again): what reading costs once nothing is left to
    parse."""
    features, labels = parsed
    count = len(labels) // batch
    return read_cost(lambda: tf.data.Dataset.from_tensors(
        ({k: v[:batch] for k, v in features.items()}, labels[:batch])).repeat(count))


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
    readers = {
        "criteo_text": lambda: criteo_dataset([plain], 1024),
        "criteo_gzip": lambda: criteo_dataset([zipped], 1024),
        "tfrecord": lambda: tfrecord_dataset(files_of(os.path.join(d, "rec")), 1024, specs),
    }
    if os.path.isdir(args.movielens):   # five passes over the training split (its load in the first batch)
        readers["movielens"] = lambda: movielens_dataset(args.movielens, 1024).repeat(5)
    rates, cpu, floors = {}, {}, {}
    for name, make in readers.items():
        rates[name], cpu[name], parsed = read_cost(make, keep=True)
        floors[name] = floor_cost(parsed)[1]
    # The synthetic source as training reads it (batches from its generator through tf.data), with
    # the core's rank sampler and with numpy's searchsorted: the same rows.
    batches = args.rows // 1024
    source = make_source(cfg)
    rates["synthetic"], cpu["synthetic"], parsed = read_cost(
        lambda: source.train_input_fn(1024)().take(batches), keep=True)
    floors["synthetic"] = floor_cost(parsed)[1]
    samplers, source.gen._samplers = source.gen._samplers, None
    numpy_cpu = read_cost(lambda: source.train_input_fn(1024)().take(batches))[1]
    source.gen._samplers = samplers
    step = run(dataclasses.replace(cfg, model_dir=os.path.join(d, "model")), printer=lambda *a, **k: None)
    step_rate = step["examples_per_sec"]
    for name, rate in rates.items():
        print(f"{name:12s} {rate:9.0f} examples/s = {rate / step_rate:.2f}x the demo model's training rate "
              f"({step_rate:.0f} examples/s, one process); CPU {cpu[name]:.2f} us/example = "
              f"{cpu[name] / floors[name]:.2f}x the floor ({floors[name]:.2f} us/example: the same batches, parsed, "
              f"from memory)", flush=True)
    print(f"RATIO synthetic CPU per example, core sampler / numpy searchsorted: {cpu['synthetic'] / numpy_cpu:.2f}x "
          f"({cpu['synthetic']:.2f} / {numpy_cpu:.2f} us/example)", flush=True)
    print(json.dumps({"reader_examples_per_sec": {k: round(v) for k, v in rates.items()},
                      "cpu_us_per_example": {k: round(v, 3) for k, v in cpu.items()},
                      "floor_cpu_us_per_example": {k: round(v, 3) for k, v in floors.items()},
                      "synthetic_numpy_cpu_us_per_example": round(numpy_cpu, 3),
                      "demo_train_examples_per_sec": round(step_rate),
                      "ratios": {k: round(v / step_rate, 2) for k, v in rates.items()}}), flush=True)
    return 0 if min(rates.values()) >= 2 * step_rate else 1


if __name__ == "__main__":
    sys.exit(main())
