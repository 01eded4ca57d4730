"""The demo model (configs/demo.yaml) on a local cluster: `tfps launch` with 2 PS and 1 or 2
workers (the chief counts as one), against `tfps train` in one process on the same data and
step budget.

Prints examples/s (the job's steady rate, and each trainer's own), AUC, and the cross-task
traffic of a traced step (RecvTensor RPCs and bytes, from RunMetadata step stats); and what
an example costs: CPU seconds per 1,000 examples of each task and of the whole cluster against
the one process (the launcher's `cost`; for the one process the same /proc sampling over its
steady window), and, with --netns (tasks as emulated hosts), bytes and messages per step.

On a 2-core machine the cluster's 4-5 processes share 2 cores, so the 1-vs-2-worker figure
shows the framework's and gRPC's overhead, not scaling; CPU per example does not depend on how
many cores the tasks share, so the cluster's CPU per example over one process's is the overhead.

Usage: python benchmarks/bench_cluster.py [steps] [--netns]   (default 1500)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tfps.cluster.cost import Meter  # noqa: E402


def run(command, steps):
    """`tfps COMMAND` on the demo config: its final JSON, and for `train` (one process) its CPU
    per 1,000 examples over its steady window, sampled from /proc as the launcher samples tasks."""
    model_dir = tempfile.mkdtemp(prefix="tfps_bench_cluster_")
    args = [sys.executable, "-m", "tfps.cli", *command, "--config", "configs/demo.yaml",
            "--set", f"train.steps={steps}", "--set", f"model_dir={model_dir}"]
    meter = Meter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=err, text=True)
        deadline = time.time() + 1800
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                meter.exited("process", rusage)
                break
            if time.time() > deadline:
                proc.kill()
            meter.sample("process", proc.pid)
            time.sleep(0.25)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    metrics = json.loads(stdout.strip().splitlines()[-1])
    if command[0] == "train":
        w = metrics["steady_window"]
        cpu = meter.cpu["process"].between(w["start"], w["end"])
        metrics["cpu_s_per_1k_examples"] = round(cpu * 1000 / w["examples"], 3)
        metrics["cpu_us_per_example"] = round(cpu * 1e6 / w["examples"], 2)
    return metrics


def _cost_rows(name, m, single):
    c = m["cost"]
    per_task = ", ".join(f"{t} {r['cpu_s_per_1k_examples']}" for t, r in c["tasks"].items())
    rows = [(f"{name}: CPU-s per 1k examples", f"{c['total']['cpu_s_per_1k_examples']} "
             f"({c['total']['cpu_s_per_1k_examples'] / single['cpu_s_per_1k_examples']:.2f}x 1 process; per task: "
             f"{per_task})")]
    if any(r["bytes_sent_per_step"] is not None for r in c["tasks"].values()):
        rows.append((f"{name}: per step, KiB sent/received, messages",
                     ", ".join(f"{t} {r['bytes_sent_per_step'] / 1024:.1f}/{r['bytes_received_per_step'] / 1024:.1f} "
                               f"{r['messages_per_step']:g}" for t, r in c["tasks"].items())))
    else:
        rows.append((f"{name}: messages per step", ", ".join(f"{t} {r['messages_per_step']:g}"
                                                              for t, r in c["tasks"].items())
                     + " (bytes: loopback has no link per task; --netns measures them)"))
    return rows


def main():
    netns = "--netns" in sys.argv[1:]
    numbers = [a for a in sys.argv[1:] if a != "--netns"]
    steps = int(numbers[0]) if numbers else 1500
    launch = ["launch", "--ps", "2"] + (["--netns"] if netns else [])
    single = run(["train"], steps)
    one = run(launch + ["--workers", "1"], steps)
    two = run(launch + ["--workers", "2"], steps)
    rows = [("steps x batch", f"{steps} x {single['batch_size']}" + (", tasks as emulated hosts (--netns)" if netns
                                                                     else "")),
            ("1 process: examples/s (steady)", f"{single['examples_per_sec']:.0f}, AUC {single['auc']:.4f}"),
            ("1 process: CPU-s per 1k examples", f"{single['cpu_s_per_1k_examples']}")]
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
        rows += _cost_rows(name, m, single)
    rows.append(("2 workers vs 1 worker", f"{two['examples_per_sec'] / one['examples_per_sec']:.2f}x"))
    report(rows)
    print(json.dumps({"one_process": {"cpu_s_per_1k_examples": single["cpu_s_per_1k_examples"], "auc": single["auc"]},
                      **{k: {"cost": m["cost"], "auc": m["auc"]} for k, m in (("ps2_workers1", one),
                                                                              ("ps2_workers2", two))}}))


if __name__ == "__main__":
    main()
