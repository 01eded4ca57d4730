"""tfps serve against calling the SavedModel in-process, same run.

The demo model (configs/demo.yaml, trained briefly) exported and served by `tfps serve` (a
separate process), batch-1 requests from a stock PredictionServiceStub kept `concurrency`
deep (closed loop): p50 / p99 latency and requests/s at concurrency 1, 8 and 32, for gRPC with
and without server-side batching, for the same server's REST API (JSON :predict bodies, one
keep-alive connection per thread), for an echo server in the same grpcio (the floor:
benchmarks/serving_echo.py), and for the loaded SavedModel called from as many threads in this
process; each server's CPU per request from /proc. Then a load run: requests at concurrency 8 while a trainer writes table deltas
that the server follows (--follow) and a new version is dropped in (swap): failed requests
(required 0), versions answered, deltas applied.

Draws docs/serving_latency.png (matplotlib: benchmarks/requirements.txt). The last line is JSON.

Usage: python benchmarks/bench_serving.py [--seconds 5] [--load-seconds 60] [--quick]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import grpc  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import pyplot  # noqa: E402

PLOT = os.path.join(ROOT, "docs", "serving_latency.png")
CONCURRENCY = (1, 8, 32)


def tfps(*args, timeout=1800):
    out = subprocess.run([sys.executable, "-m", "tfps.cli", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"tfps {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def free_port():
    """A port free now on loopback, below the ephemeral range (`tfps serve --rest_api_port 0`
    means no REST, as in TF Serving)."""
    from tfps.cluster.ports import free_ports
    return free_ports(1)[0]


class Server:
    """A `tfps serve` process (or `command`, e.g. the echo floor); its stderr lines are kept (what
    it applied)."""

    def __init__(self, base, *flags, command=None):
        command = command or [sys.executable, "-m", "tfps.cli", "serve", "--model_base_path", base,
                              "--model_name", "demo", "--port", "0", "--rest_api_port", str(free_port()), *flags]
        self.proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, PYTHONPATH=ROOT))
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{command[2]} did not start:\n{self.proc.stderr.read()[-3000:]}")
        ready = json.loads(line)
        self.port, self.rest_port = ready["grpc_port"], ready.get("rest_api_port")
        self.lines = []
        threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stderr.readline, "")), daemon=True).start()
        self.stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{self.port}"))

    def cpu_seconds(self):
        """The server process's CPU time so far (user + system, /proc/<pid>/stat)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def requests_of(rows):
    out = []
    for i in range(len(rows["ids"])):
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "demo"
        for k, v in rows.items():
            req.inputs[k].CopyFrom(tf.make_tensor_proto(v[i:i + 1]))
        out.append(req)
    return out


def drive(stub, requests, concurrency, seconds, on_answer=None):
    """Closed loop: `concurrency` requests in flight for `seconds`. Returns (latencies s, failures)."""
    lock, latencies, failures = threading.Lock(), [], []
    stop, idle = threading.Event(), threading.Semaphore(0)
    counter = iter(range(1 << 62))

    def issue():
        req = requests[next(counter) % len(requests)]
        start = time.perf_counter()
        future = stub.Predict.future(req, timeout=30)
        future.add_done_callback(lambda f: done(f, start))

    def done(future, start):
        took = time.perf_counter() - start
        error = future.exception()
        with lock:
            (failures.append(error) if error is not None else latencies.append(took))
        if error is None and on_answer is not None:
            on_answer(future.result())
        if stop.is_set():
            idle.release()
        else:
            issue()
    for _ in range(concurrency):
        issue()
    time.sleep(seconds)
    stop.set()
    for _ in range(concurrency):
        idle.acquire(timeout=60)
    return latencies, failures


def _closed_loop(loop, concurrency, seconds, stop):
    """Runs loop(offset) on `concurrency` threads for `seconds`, then sets `stop` and joins them."""
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()


def drive_rest(port, bodies, concurrency, seconds):
    """Closed loop over REST: `concurrency` threads, each posting :predict bodies (JSON, batch-1)
    on its own connection for `seconds`. Returns (latencies s, failures)."""
    import http.client
    lock, latencies, failures = threading.Lock(), [], []
    stop = threading.Event()

    def loop(offset):
        conn, i, mine, bad = http.client.HTTPConnection("127.0.0.1", port, timeout=30), offset, [], []
        while not stop.is_set():
            start = time.perf_counter()
            try:
                conn.request("POST", "/v1/models/demo:predict", bodies[i % len(bodies)],
                             {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                (mine if response.status == 200 else bad).append(time.perf_counter() - start)
            except (OSError, http.client.HTTPException) as e:
                bad.append(e)
                conn.close()
            i += concurrency
        conn.close()
        with lock:
            latencies.extend(mine)
            failures.extend(bad)
    _closed_loop(loop, concurrency, seconds, stop)
    return latencies, failures


def in_process(export_dir, rows, concurrency, seconds):
    from tfps.serving.servable import Servable
    servable = Servable(export_dir, 1)
    signature = servable.signature(None)
    servable.warm_up()
    latencies, stop = [], threading.Event()

    def loop(offset):
        i, mine = offset, []
        while not stop.is_set():
            row = {k: v[i % len(v)][None] for k, v in rows.items()}
            start = time.perf_counter()
            servable.run(signature, row)
            mine.append(time.perf_counter() - start)
            i += concurrency
        latencies.extend(mine)
    _closed_loop(loop, concurrency, seconds, stop)
    servable.retire()
    return latencies, []


def summary(latencies, failures, seconds):
    lat = np.asarray(latencies) * 1e3
    return {"qps": round(len(lat) / seconds, 1), "p50_ms": round(float(np.percentile(lat, 50)), 3),
            "p99_ms": round(float(np.percentile(lat, 99)), 3), "failed": len(failures)}


def plot(results, path):
    plt = pyplot(path)
    if plt is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=110)
    for (mode, by_c), color in zip(results.items(), ("#1b9e77", "#999999", "#d95f02", "#7570b3", "#e7298a")):
        cs = sorted(by_c)
        left.plot(cs, [by_c[c]["qps"] for c in cs], "o-", color=color, label=mode)
        right.plot(cs, [by_c[c]["p50_ms"] for c in cs], "o-", color=color, label=f"{mode} p50")
        right.plot(cs, [by_c[c]["p99_ms"] for c in cs], "o--", color=color, label=f"{mode} p99")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(CONCURRENCY, [str(c) for c in CONCURRENCY])
        ax.set_xlabel("requests in flight (batch-1 each)")
    left.set_ylabel("requests / s")
    right.set_ylabel("latency, ms")
    right.set_yscale("log")
    left.legend(fontsize=7)
    right.legend(fontsize=6, ncol=2)
    fig.suptitle("tfps serve, demo model, 2-core machine")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="per latency cell")
    parser.add_argument("--load-seconds", type=float, default=60.0, help="the load run with a swap and deltas")
    parser.add_argument("--quick", action="store_true", help="a short run (the test suite's): 1 s cells, 12 s load")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.load_seconds = 1.0, 12.0
    root = tempfile.mkdtemp(prefix="tfps_bench_serving_")
    model, base = os.path.join(root, "model"), os.path.join(root, "versions")
    sets = ["--set", f"model_dir={model}", "--set", "eval.examples=4096"]
    steps = 100 if args.quick else 300
    tfps("train", "--config", "configs/demo.yaml", *sets, "--set", f"train.steps={steps}")
    first = tfps("export", "--config", "configs/demo.yaml", *sets, "--export-dir", base)["saved_model"]

    from tfps.config import load_config
    from tfps.data import SyntheticCriteo
    from tfps.data.sources import eval_set
    tf.compat.v1.disable_eager_execution()
    rows, _, _ = eval_set(SyntheticCriteo(load_config("configs/demo.yaml").data), 512, 512)
    requests = requests_of(rows)

    bodies = [json.dumps({"inputs": {k: v[i:i + 1].tolist() for k, v in rows.items()}}) for i in range(len(rows["ids"]))]
    results = {"in-process SavedModel": {}, "gRPC echo (floor)": {}, "gRPC": {}, "gRPC + batching": {}, "REST": {}}
    for c in CONCURRENCY:
        results["in-process SavedModel"][c] = summary(*in_process(first, rows, c, args.seconds), args.seconds)
    echo = [sys.executable, os.path.join(ROOT, "benchmarks", "serving_echo.py")]
    for mode, flags, command in (("gRPC echo (floor)", [], echo), ("gRPC", [], None),
                                 ("gRPC + batching", ["--max_batch_size", "32", "--batch_timeout_micros", "2000"],
                                  None)):
        server = Server(base, *flags, command=command)
        try:
            drive(server.stub, requests, 4, 0.5)   # warm the channel
            runs = [(mode, lambda c: drive(server.stub, requests, c, args.seconds))]
            if mode == "gRPC":   # the same server's REST API, same rows as JSON
                runs.append(("REST", lambda c: drive_rest(server.rest_port, bodies, c, args.seconds)))
            for name, run in runs:
                for c in CONCURRENCY:
                    cpu = server.cpu_seconds()
                    latencies, failures = run(c)
                    results[name][c] = {**summary(latencies, failures, args.seconds),
                                        "server_cpu_us_per_request": round((server.cpu_seconds() - cpu) * 1e6
                                                                           / max(1, len(latencies) + len(failures)), 1)}
        finally:
            server.stop()
    for mode, by_c in results.items():
        for c, r in by_c.items():
            cpu = f"  server CPU {r['server_cpu_us_per_request']:6.1f} us/request" if "server_cpu_us_per_request" in r \
                else ""
            print(f"{mode:>22s}  concurrency {c:2d}: {r['qps']:8.1f} req/s  p50 {r['p50_ms']:7.2f} ms  "
                  f"p99 {r['p99_ms']:7.2f} ms  failed {r['failed']}{cpu}")
    ratios = {}
    for c in CONCURRENCY:
        base_qps, floor = results["in-process SavedModel"][c]["qps"], results["gRPC echo (floor)"][c]["qps"]
        ratios[str(c)] = {"grpc_vs_in_process": round(results["gRPC"][c]["qps"] / base_qps, 3),
                          "batching_vs_in_process": round(results["gRPC + batching"][c]["qps"] / base_qps, 3),
                          "echo_vs_in_process": round(floor / base_qps, 3),
                          "grpc_vs_echo": round(results["gRPC"][c]["qps"] / floor, 3),
                          "rest_vs_grpc": round(results["REST"][c]["qps"] / results["gRPC"][c]["qps"], 3),
                          "p99_grpc_vs_in_process": round(results["gRPC"][c]["p99_ms"]
                                                          / results["in-process SavedModel"][c]["p99_ms"], 2)}
        r = ratios[str(c)]
        print(f"concurrency {c:2d}: gRPC {r['grpc_vs_in_process']:.2f}x in-process req/s, with batching "
              f"{r['batching_vs_in_process']:.2f}x; the echo floor {r['echo_vs_in_process']:.2f}x, gRPC "
              f"{r['grpc_vs_echo']:.2f}x of the floor; p99 {r['p99_grpc_vs_in_process']:.2f}x in-process; "
              f"REST {r['rest_vs_grpc']:.2f}x gRPC")

    # The load run: a trainer writes deltas that the server follows; a new version mid-way.
    server = Server(base, "--follow", model, "--max_batch_size", "32", "--batch_timeout_micros", "500")
    versions = set()
    trainer = None
    try:
        def start_trainer():
            nonlocal trainer
            trainer = subprocess.Popen(
                [sys.executable, "-m", "tfps.cli", "train", "--config", "configs/demo.yaml", *sets,
                 "--set", f"train.steps={steps + (300 if args.quick else 3000)}", "--set", "train.delta_every_secs=1",
                 "--set", "train.batch_size=256"], cwd=ROOT, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)

        def new_version():
            staging = os.path.join(root, "staging")
            shutil.copytree(first, staging)
            os.rename(staging, os.path.join(base, str(int(os.path.basename(first)) + 1)))
        timers = [threading.Timer(args.load_seconds * 0.1, start_trainer),
                  threading.Timer(args.load_seconds * 0.5, new_version)]
        for t in timers:
            t.start()
        latencies, failures = drive(server.stub, requests, 8, args.load_seconds,
                                    on_answer=lambda r: versions.add(r.model_spec.version.value))
        for t in timers:
            t.join()
    finally:
        if trainer is not None:
            trainer.kill()
            trainer.wait()
        server.stop()
    applied = [line for line in server.lines if line.startswith("tfps serve --follow: applied")]
    lags = [float(line.split(", ")[-1].split()[0]) for line in applied if "after it was written" in line]
    load = {**summary(latencies, failures, args.load_seconds), "versions_answered": len(versions),
            "deltas_applied": len(lags), "checkpoints_applied": sum(" checkpoint " in line for line in applied),
            "delta_lag_s": {"median": round(float(np.median(lags)), 3), "max": round(max(lags), 3)} if lags else None}
    print(f"load run {args.load_seconds:.0f} s at concurrency 8 with a version swap and a following trainer: "
          f"{load['qps']} req/s, p99 {load['p99_ms']} ms, failed {load['failed']}, versions answered "
          f"{load['versions_answered']}, deltas applied to the served version {load['deltas_applied']} (seconds from "
          f"written to applied: "
          f"{load['delta_lag_s']}; polls every 1 s), full checkpoints applied {load['checkpoints_applied']}")
    if not args.no_plot:
        plot(results, PLOT)
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"latency": {m: {str(c): r for c, r in by_c.items()} for m, by_c in results.items()},
                      "ratios": ratios, "load_run": load}))


if __name__ == "__main__":
    main()
