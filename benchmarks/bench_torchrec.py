"""The demo model (configs/demo.yaml: DeepFM, 26 id fields of dim 8 + a first-order weight, 13 dense
features, MLP 256-128-64, batch 1024, Adagrad lr 0.5) on tfps against TorchRec on CPU, on the same
batches, sides alternating, each side `--repeats` times:

  tfps, 1 process        `tfps train` (one merged dynamic table; ids hashed into 2^40 get a row when first seen)
  TorchRec fixed         one fixed-size table per field (vocabulary size + 1 rows), indexed by the id's rank,
                         fbgemm's fused EXACT_ADAGRAD (benchmarks/torchrec_deepfm.py --mode fixed)
  TorchRec MCH           the raw 2^40 ids through ManagedCollisionCollection / MCHManagedCollisionModule
                         (LFU eviction; an id gets its row in the step it is first seen), zch_size per
                         field = vocabulary size + 2 (every id of the field fits; torchrec_deepfm.py --mode mch)
  tfps, 2 PS + 1 worker  `tfps launch --ps 2 --workers 1` (all three processes on this machine's cores)
  TorchRec fixed, OpenMP default wait   TorchRec fixed once more, its OpenMP threads spin-waiting

The TorchRec runs set torch.set_num_threads(--threads, 2) and OMP_WAIT_POLICY=PASSIVE, but for the last
side, which keeps OpenMP's default (threads spin before they sleep). With the cores to itself spinning
is faster (85k examples/s once, against 45-56k passive); with anything else on the 2 cores a spinning
thread holds a core the thread it waits for needs, and TorchRec fixed ran 5-30x slower (1.5k-11k
examples/s, 80-650 CPU-ms per 1k examples, against 45-56k and 17-24 passive, in alternating runs).
Passive is the figure that holds on a shared machine; the last side says what spinning gave in this run,
and the ratios are given against both.

The data: SyntheticCriteo(cfg.data).batch(i, 1024) for i in 0..steps-1 (the batches `tfps train` reads in
one process: its input starts at batch 0, stride 1; a 1-worker cluster's only trainer reads the same) and
the eval set of tfps.data.sources.eval_set (the one `tfps train` evaluates on), written once to an .npz
that the TorchRec runs load whole (their batches are made in advance; tfps makes its own in its input
pipeline, beside training: see UNFAIR). Each id is also stored as its rank in its field (for the fixed tables).

Measured over a steady window, steps warmup..steps (default 100..300): examples/s of wall time and CPU
per 1,000 examples. tfps, 1 process: its own JSON (`steady_window`: from its first progress line, put at
step `warmup` by train.log_every_steps, to its last step; wall time and time.process_time of the process).
tfps cluster: the launcher's JSON (`examples_per_sec` over the chief's steady window; `cost.total`: every
task's CPU, PS included, sampled from /proc over that window). TorchRec: time.perf_counter and
time.process_time around steps warmup..steps in its process. AUC: exact (tfps.data.synthetic.auc) on the
eval set after training, each side's own eval pass. Figures are medians over the repeats (AUC: mean).

Needs .venv-torchrec (`make bench-torchrec` builds it: benchmarks/requirements-torchrec.txt).
Usage: python benchmarks/bench_torchrec.py [--steps 300 --warmup 100 --repeats 3] [--quick]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tfps.config import load_config  # noqa: E402
from tfps.data.sources import eval_set  # noqa: E402
from tfps.data.synthetic import SyntheticCriteo, auc  # noqa: E402

CONFIG = "configs/demo.yaml"
TORCHREC_PYTHON = os.path.join(ROOT, ".venv-torchrec", "bin", "python")
SIDES = ("tfps", "torchrec_fixed", "torchrec_mch", "tfps_cluster", "torchrec_fixed_spin")
NAMES = {"tfps": "tfps, 1 process", "torchrec_fixed": "TorchRec fixed", "torchrec_mch": "TorchRec MCH",
         "tfps_cluster": "tfps, 2 PS + 1 worker", "torchrec_fixed_spin": "TorchRec fixed, OpenMP default wait"}

UNFAIR = [
    "for TorchRec: its batches are made in advance and loaded whole; tfps generates each batch in its "
    "input pipeline during training (SyntheticCriteo, ~2.6 ms CPU per 1024 rows), counted in its CPU and "
    "competing for the 2 cores",
    "for TorchRec fixed: it indexes by rank (vocabulary known in advance, no hash probe, no insert, no "
    "admission); tfps probes a hash table per id and inserts new ids",
    "for TorchRec fixed: fused EXACT_ADAGRAD updates the rows inside the backward pass (no gradient "
    "tensor of the embeddings, no separate apply)",
    "against TorchRec: fbgemm takes only row widths that are a multiple of 4: the rows of 9 are stored as 12 "
    "(a third more memory traffic per row than tfps's 9)",
    "against TorchRec: eager PyTorch (no graph, one Python dispatch per op), where tfps runs a TF graph",
    "either way: OMP_WAIT_POLICY=PASSIVE on the TorchRec sides, for a shared machine: OpenMP's default "
    "spin-wait is faster with the cores to itself, 5-30x slower beside another job (the last side)",
    "against TorchRec MCH: MCHManagedCollisionModule is a reference module: per field and step it argsorts "
    "and re-gathers its whole id buffer (zch_size) in eager ATen ops, ~60% of its CPU here; with zch_size "
    "above each field's vocabulary it never really evicts, so LFU costs only that bookkeeping",
    "for TorchRec fixed: every row is allocated up front (vocabulary known); tfps allocates a row per id "
    "seen (memory is not measured here)",
    "either way: both sides train the same model, init and optimizer (truncated normal stddev 0.02 rows, "
    "glorot dense layers, Adagrad with initial accumulator 0.1) but not the same random draws: the AUCs "
    "differ by that noise too (most at few steps, as in --quick)",
]


def ranks_of(gen, ids):
    """int32 [..., F] ranks of ids int64 [..., F] in each field (each id is gen.ids_of(f, rank) of one
    rank 0..vocab: the generator's ranks run to vocab inclusive)."""
    out = np.empty(ids.shape, np.int32)
    for f, v in enumerate(gen.vocab_sizes):
        field = gen.ids_of(f, np.arange(v + 1))
        order = np.argsort(field, kind="stable")
        pos = order[np.searchsorted(field[order], ids[..., f])]
        if not np.array_equal(field[pos], ids[..., f]):
            raise ValueError(f"field {f}: an id that no rank of the generator maps to")
        out[..., f] = pos
    return out


def write_data(cfg, steps, path):
    """Writes the training batches 0..steps-1 and the eval set as the TorchRec side loads them; returns
    the eval labels."""
    gen = SyntheticCriteo(cfg.data)
    parts = [gen.batch(i, cfg.train.batch_size) for i in range(steps)]
    dense, ids, labels = (np.stack([p[k] for p in parts]) for k in (0, 1, 2))
    features, eval_labels, _ = eval_set(gen, cfg.eval.examples, cfg.eval.batch_size)
    np.savez(path, dense=dense, ids=ids, ranks=ranks_of(gen, ids), labels=labels,
             eval_dense=features["dense"], eval_ids=features["ids"], eval_ranks=ranks_of(gen, features["ids"]),
             eval_labels=eval_labels, vocab_sizes=gen.vocab_sizes.astype(np.int64),
             lr=np.float64(cfg.train.learning_rate), hidden_units=np.array(cfg.model.hidden_units),
             embedding_dim=np.int64(cfg.model.embedding_dim),
             initial_accumulator_value=np.float64(cfg.train.adagrad.initial_accumulator_value))
    return eval_labels


def _last_json(command, env=None, timeout=3600):
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(command)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def run_tfps(args, overrides, cluster):
    model_dir = tempfile.mkdtemp(prefix="tfps_bench_torchrec_")
    command = [sys.executable, "-m", "tfps.cli", *(["launch", "--ps", "2", "--workers", "1"] if cluster else ["train"]),
               "--config", CONFIG, *[a for o in overrides + [f"model_dir={model_dir}"] for a in ("--set", o)]]
    try:
        m = _last_json(command)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    w = m["steady_window"]
    if cluster:
        cpu_ms = m["cost"]["total"]["cpu_s_per_1k_examples"] * 1000.0
    else:
        cpu_ms = w["process_cpu_seconds"] * 1e6 / w["examples"]
    return {"examples_per_sec": m["examples_per_sec"], "cpu_ms_per_1k_examples": round(cpu_ms, 2),
            "auc": m["auc"], "window_steps": w["global_steps"]}


def run_torchrec(args, mode, data, eval_labels, spin=False):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if not spin:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    scores = os.path.join(os.path.dirname(data), f"scores_{mode}.npy")
    m = _last_json([args.torchrec_python, os.path.join(ROOT, "benchmarks", "torchrec_deepfm.py"), "--data", data,
                    "--mode", mode, "--warmup", str(args.warmup), "--threads", str(args.threads),
                    "--scores", scores], env=env)
    m["auc"] = round(auc(eval_labels, np.load(scores)), 4)   # tfps's exact AUC, as for the tfps runs
    return {k: m[k] for k in ("examples_per_sec", "cpu_ms_per_1k_examples", "auc", "window_steps")}


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100, help="steps before the measured window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eval-examples", type=int, default=None, help="default: the config's eval.examples")
    parser.add_argument("--quick", action="store_true", help="40 steps (window 20..40), 1 repeat, 20,000 eval examples")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"a subset of {','.join(SIDES)}")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads on the TorchRec side")
    parser.add_argument("--torchrec-python", default=TORCHREC_PYTHON)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.repeats = 40, 20, 1
        args.eval_examples = args.eval_examples or 20000
    sides = [s for s in SIDES if s in args.sides.split(",")]
    if not 0 < args.warmup < args.steps:
        raise SystemExit("--warmup must be in (0, --steps)")
    if any(s.startswith("torchrec") for s in sides) and not os.path.exists(args.torchrec_python):
        raise SystemExit(f"{args.torchrec_python} is missing: `make bench-torchrec` builds .venv-torchrec")
    overrides = [f"train.steps={args.steps}", f"train.log_every_steps={args.warmup}",
                 f"train.save_checkpoints_steps={args.steps}"]
    if args.eval_examples:
        overrides.append(f"eval.examples={args.eval_examples}")
    cfg = load_config(os.path.join(ROOT, CONFIG), overrides)
    runs = {s: [] for s in sides}
    with tempfile.TemporaryDirectory(prefix="bench_torchrec_") as tmp:
        data = os.path.join(tmp, "batches.npz")
        t = time.perf_counter()
        eval_labels = write_data(cfg, args.steps, data)
        print(f"{args.steps} batches of {cfg.train.batch_size} and {cfg.eval.examples} eval examples written in "
              f"{time.perf_counter() - t:.1f} s; window steps {args.warmup}..{args.steps}, {args.repeats} repeats",
              flush=True)
        for r in range(args.repeats):
            for side in sides:
                if side.startswith("torchrec"):
                    m = run_torchrec(args, side.split("_")[1], data, eval_labels, spin=side.endswith("_spin"))
                else:
                    m = run_tfps(args, overrides, cluster=side == "tfps_cluster")
                runs[side].append(m)
                print(f"repeat {r + 1}: {NAMES[side]}: {m['examples_per_sec']:.0f} examples/s, "
                      f"{m['cpu_ms_per_1k_examples']:.1f} CPU-ms per 1k examples, AUC {m['auc']:.4f}", flush=True)
    summary = {s: {"examples_per_sec": round(median(rs, "examples_per_sec"), 1),
                   "cpu_ms_per_1k_examples": round(median(rs, "cpu_ms_per_1k_examples"), 2),
                   "auc": round(statistics.mean(r["auc"] for r in rs), 4), "runs": rs} for s, rs in runs.items()}
    rows = [("steps x batch, window", f"{args.steps} x {cfg.train.batch_size}, steps {args.warmup}..{args.steps}, "
             f"{args.repeats} repeats (medians; AUC mean) on {cfg.eval.examples} eval examples")]
    for s, m in summary.items():
        rows.append((f"{NAMES[s]}: examples/s, CPU-ms per 1k examples, AUC",
                     f"{m['examples_per_sec']:.0f}, {m['cpu_ms_per_1k_examples']:.1f}, {m['auc']:.4f}"))
    ratios = {}
    for a in ("tfps", "tfps_cluster"):
        for b in ("torchrec_fixed", "torchrec_fixed_spin", "torchrec_mch"):
            if a in summary and b in summary:
                x, y = summary[a], summary[b]
                q = ratios[f"{a}/{b}"] = {
                    "examples_per_sec": round(x["examples_per_sec"] / y["examples_per_sec"], 3),
                    "cpu_per_example": round(x["cpu_ms_per_1k_examples"] / y["cpu_ms_per_1k_examples"], 3),
                    "auc_difference": round(x["auc"] - y["auc"], 4)}
                rows.append((f"{NAMES[a]} / {NAMES[b]}", f"{q['examples_per_sec']:.2f}x examples/s, "
                             f"{q['cpu_per_example']:.2f}x CPU per example, AUC {q['auc_difference']:+.4f}"))
    report(rows)
    print("what is unfair, and to whom:")
    for item in UNFAIR:
        print(f"  - {item}")
    print(json.dumps({"steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
                      "batch_size": cfg.train.batch_size, "eval_examples": cfg.eval.examples,
                      "threads": args.threads, "sides": summary, "ratios": ratios}))


if __name__ == "__main__":
    main()
