"""The demo model (configs/demo.yaml) on a local cluster: `tfps launch` with 2 PS and 1 or 2
workers (the chief counts as one), against `tfps train` in one process on the same data and
step budget.

Prints examples/s (the job's steady rate, and each trainer's own), AUC, and the cross-task
traffic of a traced step (RecvTensor RPCs and bytes, from RunMetadata step stats).

On a 2-core machine the cluster's 4-5 processes share 2 cores, so the 1-vs-2-worker figure
shows the framework's and gRPC's overhead, not scaling.

Usage: python benchmarks/bench_cluster.py [steps]   (default 1500)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(command, steps):
    model_dir = tempfile.mkdtemp(prefix="tfps_bench_cluster_")
    args = [sys.executable, "-m", "tfps.cli", *command, "--config", "configs/demo.yaml",
            "--set", f"train.steps={steps}", "--set", f"model_dir={model_dir}"]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    single = run(["train"], steps)
    one = run(["launch", "--ps", "2", "--workers", "1"], steps)
    two = run(["launch", "--ps", "2", "--workers", "2"], steps)
    rows = [("steps x batch", f"{steps} x {single['batch_size']}"),
            ("1 process: examples/s (steady)", f"{single['examples_per_sec']:.0f}, AUC {single['auc']:.4f}")]
    for name, m in (("2 PS + 1 worker", one), ("2 PS + 2 workers", two)):
        own = ", ".join(f"{t} {s.get('task_examples_per_sec', 0):.0f}" for t, s in m["tasks"].items())
        rows.append((f"{name}: examples/s (steady)",
                     f"{m['examples_per_sec']:.0f} ({m['examples_per_sec'] / single['examples_per_sec']:.2f}x "
                     f"1 process; per task: {own}), AUC {m['auc']:.4f} ({m['auc'] - single['auc']:+.4f} vs 1 "
                     f"process)"))
        t = m["traffic_per_step"]
        rows.append((f"{name}: traffic per step (chief)",
                     f"{t['messages']:.0f} messages ({t['recv_tensor_rpcs']:.0f} RecvTensor traced), {t['bytes'] / 2**20:.2f} MiB "
                     f"({t['bytes_to_ps'] / 2**20:.2f} to PS, {t['bytes_from_ps'] / 2**20:.2f} from PS), "
                     f"{t['tasks']:.0f} tasks run a partition"))
    rows.append(("2 workers vs 1 worker", f"{two['examples_per_sec'] / one['examples_per_sec']:.2f}x"))
    report(rows)


if __name__ == "__main__":
    main()
