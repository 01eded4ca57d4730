"""What a global step costs a cluster beyond its examples: a 1-worker cluster (2 PS + the chief,
`tfps launch`, loopback) against `tfps train` in one process, both with the embedding pipeline,
at several batch sizes, the two alternated so that load on the shared machine hits both alike.

Per batch size it prints the cluster's examples/s and CPU per example over the one process's
(issue 26's bars: >= 0.9x and <= 1.15x), and the cluster's extra CPU per global step,
(cluster - one process) CPU per example x batch. When that extra is the same at every batch
size, the cluster's overhead is a fixed cost per step (RPCs, the master's step protocol, each
task's executor and thread wake-ups), which a larger batch spreads thinner.

CPU per example is each task's CPU (user + system, from /proc, as the launcher's `cost`) over the
chief's steady window; it does not depend on how many cores the tasks share.

Usage: python benchmarks/bench_cluster_batch.py [--quick] [--repeats N] [--batches 512,1024,...]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(__file__))
from bench_cluster import run  # noqa: E402
from common import report  # noqa: E402

EXAMPLES = 3_000_000   # per run: ~30 s of steady state at the demo's rates


def measure(batch, examples):
    """(one process, cluster) at this batch size: {examples_per_sec, cpu_us_per_example, auc}."""
    steps = max(100, examples // batch)
    sets = ["--set", f"train.batch_size={batch}", "--set", "pipeline.enabled=true"]
    one = run(["train", *sets], steps)
    cluster = run(["launch", "--ps", "2", "--workers", "1", *sets], steps)
    window = cluster["cost"]["window"]
    tasks = {t: r["cpu_seconds_in_window"] * 1e6 / window["examples"] for t, r in cluster["cost"]["tasks"].items()}
    return ({"examples_per_sec": one["examples_per_sec"], "cpu_us_per_example": one["cpu_us_per_example"],
             "auc": one["auc"]},
            {"examples_per_sec": cluster["examples_per_sec"], "cpu_us_per_example": sum(tasks.values()),
             "tasks": {t: round(v, 2) for t, v in tasks.items()}, "auc": cluster["auc"],
             "messages_per_step": {t: r["messages_per_step"] for t, r in cluster["cost"]["tasks"].items()}})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="512,1024,2048,4096")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one repeat of batch 1024 and 4096, 1/6 the examples")
    args = parser.parse_args()
    batches = [1024, 4096] if args.quick else [int(b) for b in args.batches.split(",")]
    repeats, examples = (1, EXAMPLES // 6) if args.quick else (args.repeats, EXAMPLES)
    runs = {b: [] for b in batches}
    for _ in range(repeats):   # round-robin: each round has every batch size, one process then cluster
        for b in batches:
            runs[b].append(measure(b, examples))
    rows, out = [], {}
    for b, pairs in runs.items():
        speed = [c["examples_per_sec"] / o["examples_per_sec"] for o, c in pairs]
        cpu = [c["cpu_us_per_example"] / o["cpu_us_per_example"] for o, c in pairs]
        extra_ms = [(c["cpu_us_per_example"] - o["cpu_us_per_example"]) * b / 1000 for o, c in pairs]
        one_ms = [o["cpu_us_per_example"] * b / 1000 for o, _ in pairs]
        rows.append((f"batch {b}: cluster / one process, examples/s",
                     " ".join(f"{s:.2f}x" for s in speed) + "  (" + ", ".join(
                         f"{c['examples_per_sec']:.0f} / {o['examples_per_sec']:.0f}" for o, c in pairs) + ")"))
        rows.append((f"batch {b}: cluster / one process, CPU per example",
                     " ".join(f"{s:.2f}x" for s in cpu) + "  (" + ", ".join(
                         f"{c['cpu_us_per_example']:.2f} / {o['cpu_us_per_example']:.2f} us" for o, c in pairs) + ")"))
        rows.append((f"batch {b}: CPU per global step, one process; the cluster's extra",
                     f"{statistics.median(one_ms):.1f} ms; +{statistics.median(extra_ms):.1f} ms "
                     f"(runs: {', '.join(f'{x:+.1f}' for x in extra_ms)})"))
        out[b] = {"speed_ratio": [round(s, 3) for s in speed], "cpu_ratio": [round(s, 3) for s in cpu],
                  "extra_cpu_ms_per_step": [round(x, 2) for x in extra_ms],
                  "one_process_cpu_ms_per_step": [round(x, 2) for x in one_ms], "runs": pairs}
    report(rows)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
