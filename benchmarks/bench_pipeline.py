"""The embedding pipeline (pipeline.enabled) against the same step without it, same run.

The demo model (configs/demo.yaml) on `tfps launch --ps 2 --workers 1`, pipeline off and on, at
loopback and with 0.5 ms and 2 ms one-way latency (cluster.emulated_latency_ms: a relay in front
of each PS), plus `tfps train` in one process, off and on. Prints examples/s, the on/off ratio,
RecvTensor messages and bytes per step, AUC, and where a traced step's time went (embedding
wait, dense compute, push; tfps.estimator.step_phases), and draws that breakdown to
docs/pipeline_breakdown.png (matplotlib: benchmarks/requirements.txt).

Usage: python benchmarks/bench_pipeline.py [steps]   (default 1500)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import pyplot, report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATENCIES_MS = (0.0, 0.5, 2.0)
PLOT = os.path.join(ROOT, "docs", "pipeline_breakdown.png")


def run(command, steps, pipeline, latency_ms=0.0):
    model_dir = tempfile.mkdtemp(prefix="tfps_bench_pipeline_")
    args = [sys.executable, "-m", "tfps.cli", *command, "--config", "configs/demo.yaml",
            "--set", f"train.steps={steps}", "--set", f"model_dir={model_dir}",
            "--set", f"pipeline.enabled={'true' if pipeline else 'false'}"]
    if latency_ms:
        args += ["--set", f"cluster.emulated_latency_ms={latency_ms}"]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def plot(results, path):
    plt = pyplot(path)
    if plt is None:
        return
    labels, phases = [], {"embedding wait": [], "dense compute": [], "push": []}
    for (latency, pipeline), m in results.items():
        t = m["traffic_per_step"]
        labels.append(f"{latency:g} ms\n{'on' if pipeline else 'off'}")
        phases["embedding wait"].append(t["embedding_wait_ms"])
        phases["dense compute"].append(t["dense_ms"])
        phases["push"].append(t["push_ms"])
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    bottom = [0.0] * len(labels)
    for (name, values), color in zip(phases.items(), ("#d95f02", "#1b9e77", "#7570b3")):
        ax.bar(labels, values, bottom=bottom, label=name, color=color, width=0.6)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("ms per traced step (trainer)")
    ax.set_title("Demo model, 2 PS + 1 worker: pipeline off / on by one-way latency")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    print(f"step breakdown drawn to {os.path.relpath(path, ROOT)}")


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    single = {p: run(["train"], steps, p) for p in (False, True)}
    cluster = {(lat, p): run(["launch", "--ps", "2", "--workers", "1"], steps, p, lat)
               for lat in LATENCIES_MS for p in (False, True)}
    rows = [("steps x batch", f"{steps} x {single[False]['batch_size']}")]
    for p in (False, True):
        rows.append((f"1 process, pipeline {'on' if p else 'off'}",
                     f"{single[p]['examples_per_sec']:.0f} examples/s, AUC {single[p]['auc']:.4f}"))
    for lat in LATENCIES_MS:
        off, on = cluster[(lat, False)], cluster[(lat, True)]
        for p, m in ((False, off), (True, on)):
            t = m["traffic_per_step"]
            rows.append((f"{lat:g} ms, pipeline {'on' if p else 'off'}",
                         f"{m['examples_per_sec']:.0f} examples/s, AUC {m['auc']:.4f}, "
                         f"{t['messages']:.0f} messages/step, {t['bytes'] / 2**20:.2f} MiB/step; traced "
                         f"step {t['step_ms']:.1f} ms = embedding wait {t['embedding_wait_ms']:.1f} + dense "
                         f"{t['dense_ms']:.1f} + push {t['push_ms']:.1f} (embedding graph {t['embedding_graph_ms']:.1f} "
                         f"ms, {100 * t['embedding_graph_ms'] / t['step_ms']:.0f}% of the step)"))
        rows.append((f"{lat:g} ms, on / off", f"{on['examples_per_sec'] / off['examples_per_sec']:.2f}x examples/s, "
                     f"AUC {on['auc'] - off['auc']:+.4f}"))
    for p in (False, True):
        rows.append((f"1 worker / 1 process, pipeline {'on' if p else 'off'}",
                     f"{cluster[(0.0, p)]['examples_per_sec'] / single[p]['examples_per_sec']:.2f}x"))
    rows.append(("1 worker (on) / 1 process (off)",
                 f"{cluster[(0.0, True)]['examples_per_sec'] / single[False]['examples_per_sec']:.2f}x"))
    report(rows)
    plot(cluster, PLOT)


if __name__ == "__main__":
    main()
