"""The stock export (`tfps export --format stock`: DenseHashTable key -> row index, rows gathered
from a variable) against the tfps export (tfps's table ops) of one model whose merged table holds
N rows of dim 16 with an Adagrad slot (DeepFM, 26 features, MLP [16]), N = 10^5, 10^6, 10^7: export
time, size on disk, saved_model.pb, load time, peak RSS while loading and RSS loaded (each load in
a fresh process: the stock export's never imports tfps, as in tensorflow_model_server), and
in-process requests/s at batch 1, 64 and 1024 (`serving_default`, 10% of the ids never seen).
The tables' bytes are N x (8 B key + 64 B row): what the export must carry. Each export runs in a
fresh process (as `tfps export` does); its peak RSS above the fixed cost (the same export's peak
for the smallest model, N = 10^3, in the same run) is set against the table bytes it wrote (the
stock format: keys and rows; the tfps format: every column, the Adagrad slot included).

    python benchmarks/bench_export.py [--quick]      (--quick: N = 10^3 and 10^5, shorter timings)"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import report  # noqa: E402

import tensorflow as tf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIM, FEATURES = 16, 26
SETS = ["model.hidden_units=[16]", f"model.embedding_dim={DIM - 1}", "train.batch_size=64", "eval.examples=1024",
        "data.vocab_max=1000"]

# Loads an export in a fresh process and serves it in-process: prints one JSON line.
LOADER = r"""
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf
path, fmt, keys_file, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
if fmt == "tfps":
    from tfps.ops import _loader
    _loader.load()
def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))
keys = np.load(keys_file)
config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
session = tf.compat.v1.Session(graph=tf.Graph(), config=config)
before = status("VmRSS")
start = time.perf_counter()
meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
load = time.perf_counter() - start
out = {"load_s": load, "peak_bytes": status("VmHWM") - before, "loaded_bytes": status("VmRSS") - before,
       "tfps_loaded": "tfps" in sys.modules, "rps": {}}
sig = meta.signature_def["serving_default"]
rng = np.random.default_rng(1)
for batch in (1, 64, 1024):
    feeds = []
    for _ in range(16):
        ids = keys[(rng.integers(0, len(keys) // 26, [batch, 26]) * 26 + np.arange(26))]
        ids[rng.random([batch, 26]) < 0.1] = rng.integers(2**40, 2**41, 1)[0]   # never seen
        feeds.append({sig.inputs["ids"].name: ids,
                      sig.inputs["dense"].name: rng.standard_normal([batch, 13]).astype(np.float32)})
    fetch = sig.outputs["probabilities"].name
    session.run(fetch, feeds[0])
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(fetch, feeds[n % 16]); n += 1
    out["rps"][batch] = n * batch / (time.perf_counter() - start)
print(json.dumps(out))
"""


# Exports a model_dir in a fresh process (as `tfps export` runs): prints one JSON line with its peak RSS.
EXPORTER = r"""
import json, sys
def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))
from tfps.config import load_config
from tfps.runner.job import export
import tensorflow as tf
sets, out, fmt = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
cfg = load_config("configs/demo.yaml", sets)
before = status("VmRSS")
path = export(cfg, out, fmt, printer=lambda *a, **k: None)
print(json.dumps({"path": path, "export_peak_bytes": status("VmHWM"), "export_start_bytes": before}))
"""


def table_bytes(path):
    """Bytes of the export's table tensors (all but the dense variables): what it carries per row."""
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    dtypes = reader.get_variable_to_dtype_map()
    total = 0
    for name, shape in reader.get_variable_to_shape_map().items():
        if "stock_" in name or "-part" in name:
            total += int(np.prod(shape, dtype=np.int64)) * dtypes[name].size
    return total


def _du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def make_model_dir(root, n):
    """A demo DeepFM trained one step, then its merged table filled to n rows (Adagrad slots set by
    one apply), saved as the model_dir's latest checkpoint. Returns (cfg, the table's ids [n])."""
    from tfps.config import load_config
    from tfps.data.sources import make_source
    from tfps.embedding.merged import Feature
    from tfps.embedding.variable import embedding_variables
    from tfps.models.spec import ModeKeys
    from tfps.models.zoo import model_fn
    from tfps.ops import embedding_table as et
    from tfps.ops.training import table_apply_adagrad
    from tfps.runner.graph import build
    from tfps.runner.job import params_of, settings_of
    from tfps.runner.training import train
    cfg = load_config("configs/demo.yaml", SETS + [f"model_dir={root}/model"])
    train(model_fn, params_of(cfg), make_source(cfg).train_input_fn(64), settings_of(cfg), 1, printer=lambda *a, **k: None)
    ids = np.random.default_rng(0).choice(2**40, n, replace=False).astype(np.int64)
    tags = np.array([Feature(f"C{f + 1}", DIM).tag for f in range(FEATURES)], np.int64)
    tagged_ids = (tags[np.arange(n) % FEATURES] << 48) | ids
    with tf.Graph().as_default() as graph:
        _, scaffold, _, gs = build(model_fn, params_of(cfg), ModeKeys.TRAIN, settings_of(cfg),
                                   input_fn=make_source(cfg).train_input_fn(64))
        (ev,) = embedding_variables(graph)
        keys = tf.compat.v1.placeholder(tf.int64, [None])   # already tagged: row i is feature i % 26's
        fill = et.table_assign(ev.handles[0], keys, tf.random.normal([tf.size(keys), DIM], stddev=0.1))
        slot = table_apply_adagrad(ev.handles[0], keys, tf.ones([tf.size(keys), DIM]), 0.01, gs)
        with tf.compat.v1.Session() as s:
            scaffold.saver.restore(s, tf.train.latest_checkpoint(cfg.model_dir))
            for part in np.array_split(tagged_ids, max(1, n // 10**6)):
                s.run(fill, {keys: part})
                s.run(slot, {keys: part})
            s.run(gs.assign(2))
            scaffold.saver.save(s, os.path.join(cfg.model_dir, "model.ckpt"), global_step=2)
    return cfg, ids


def measure(cfg, ids, root, fmt, quick):
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", EXPORTER, json.dumps(SETS + [f"model_dir={cfg.model_dir}"]),
                           os.path.join(root, fmt), fmt], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the {fmt} export failed: {done.stderr[-2000:]}")
    exported = json.loads(done.stdout.strip().splitlines()[-1])
    path = exported["path"]
    np.save(os.path.join(root, "keys.npy"), ids)   # id i is column i % 26's
    env = {**os.environ, "PYTHONPATH": ROOT} if fmt == "tfps" else {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", LOADER, path, fmt, os.path.join(root, "keys.npy"),
                           str(0.3 if quick else 2.0)], env=env, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"loading the {fmt} export failed: {done.stderr[-2000:]}")
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    if fmt == "stock" and loaded["tfps_loaded"]:
        raise RuntimeError("the stock export's loader imported tfps")
    return {"export_s": seconds, "disk_bytes": _du(path), "pb_bytes": os.path.getsize(os.path.join(path, "saved_model.pb")),
            "table_bytes": table_bytes(path), "export_peak_bytes": exported["export_peak_bytes"], **loaded}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N = 10^3 and 10^5 only, short timings (the smoke test)")
    args = parser.parse_args()
    cells, fixed = [], None
    for n in ([10**3, 10**5] if args.quick else [10**3, 10**5, 10**6, 10**7]):
        root = tempfile.mkdtemp(prefix="tfps_bench_export_")
        try:
            cfg, ids = make_model_dir(root, n)
            got = {fmt: measure(cfg, ids, root, fmt, args.quick) for fmt in ("tfps", "stock")}
        finally:
            shutil.rmtree(root, ignore_errors=True)
        table = n * (8 + 4 * DIM)
        t, s = got["tfps"], got["stock"]
        rows = [(f"N = {n:.0e} rows, dim {DIM}: tables' bytes {table / 2**20:.1f} MiB", "stock | tfps | ratio")]
        for label, key, unit, scale in (("export", "export_s", "s", 1), ("size on disk", "disk_bytes", "MiB", 2**-20),
                                        ("saved_model.pb", "pb_bytes", "KiB", 2**-10), ("load", "load_s", "s", 1),
                                        ("peak RSS while loading", "peak_bytes", "MiB", 2**-20),
                                        ("RSS loaded", "loaded_bytes", "MiB", 2**-20)):
            rows.append((f"  {label} ({unit})", f"{s[key] * scale:10.2f} | {t[key] * scale:10.2f} | "
                                                f"{s[key] / max(t[key], 1e-12):.2f}x"))
        for b in ("1", "64", "1024"):
            rows.append((f"  req/s at batch {b} (rows/s)", f"{s['rps'][b]:10.0f} | {t['rps'][b]:10.0f} | "
                                                          f"{s['rps'][b] / t['rps'][b]:.2f}x"))
        if fixed is None:   # the smallest model: the export's fixed cost (the process, TensorFlow, the graphs)
            fixed = {f: got[f]["export_peak_bytes"] for f in got}
        rows.append(("  export peak RSS (MiB)", f"{s['export_peak_bytes'] / 2**20:10.1f} | "
                                                 f"{t['export_peak_bytes'] / 2**20:10.1f} |"))
        rows.append(("  table bytes in the export (MiB)", f"{s['table_bytes'] / 2**20:10.1f} | "
                                                          f"{t['table_bytes'] / 2**20:10.1f} |"))
        for f, side in (("stock", s), ("tfps", t)):
            over = (side["export_peak_bytes"] - fixed[f]) / max(side["table_bytes"], 1)
            side["export_growth"] = over
            rows.append((f"  RATIO {f} export peak above the fixed cost / its table bytes", f"{over:.2f}x"))
        rows.append(("  RATIO stock peak RSS while loading / tables' bytes", f"{s['peak_bytes'] / table:.2f}x"))
        rows.append(("  RATIO stock peak RSS while loading / its table bytes", f"{s['peak_bytes'] / s['table_bytes']:.2f}x"))
        rows.append(("  RATIO stock size on disk / tfps", f"{s['disk_bytes'] / t['disk_bytes']:.2f}x"))
        report(rows)
        cells.append({"n": n, "table_bytes": table, "stock": s, "tfps": t, "fixed_export_bytes": fixed})
    print(json.dumps(cells))


if __name__ == "__main__":
    main()
