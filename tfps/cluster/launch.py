"""`tfps launch`: a real PS/worker cluster on this machine, one process per task.

Each task is `python -m tfps.cli train` with its own TF_CONFIG (gRPC servers on free loopback
ports); logs go to MODEL_DIR/logs/<task>.log. While the job runs, one status line per task is
printed every few seconds. When the chief exits every other task is stopped, and the launcher
exits with the chief's code after printing the chief's last line (its JSON metrics).
Ctrl-C stops every task.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_ports(n, host="127.0.0.1"):
    """n distinct ports free on host right now (bound then released)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((host, 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def cluster_spec(num_ps, num_workers, host="127.0.0.1"):
    """{"chief": [..], "worker": [..], "ps": [..]} on free ports; worker count includes the chief."""
    ports = free_ports(num_ps + num_workers, host)
    spec = {"chief": [f"{host}:{ports[0]}"], "ps": [f"{host}:{p}" for p in ports[1:1 + num_ps]]}
    if num_workers > 1:
        spec["worker"] = [f"{host}:{p}" for p in ports[1 + num_ps:]]
    return spec


def _last_line(path):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""
    except OSError:
        return ""


def launch(config, overrides, num_ps, num_workers, model_dir=None, status_every=5.0, printer=print):
    """Runs the job; returns the chief's exit code."""
    if num_ps < 1:
        raise ValueError(f"tfps launch: --ps must be >= 1 (embedding tables live on PS tasks), got {num_ps}")
    if num_workers < 1:
        raise ValueError(f"tfps launch: --workers must be >= 1, got {num_workers}")
    model_dir = model_dir or tempfile.mkdtemp(prefix="tfps_cluster_")
    log_dir = os.path.join(model_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    spec = cluster_spec(num_ps, num_workers)
    tasks = [(t, i) for t in ("ps", "chief", "worker") for i in range(len(spec.get(t, [])))]
    args = [sys.executable, "-m", "tfps.cli", "train"] + (["--config", config] if config else [])
    for item in list(overrides) + [f"model_dir={model_dir}"]:
        args += ["--set", item]
    procs = {}
    printer(f"launching {num_ps} ps + {num_workers} worker(s) (chief included) on loopback; "
            f"model_dir {model_dir}; logs in {log_dir}", flush=True)
    try:
        for task_type, index in tasks:
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": spec,
                                                          "task": {"type": task_type, "index": index}}))
            log = open(os.path.join(log_dir, f"{task_type}{index}.log"), "w")
            procs[(task_type, index)] = (subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        chief = procs[("chief", 0)][0]
        last_status = time.time()
        while chief.poll() is None:
            time.sleep(0.5)
            if time.time() - last_status >= status_every:
                last_status = time.time()
                for (task_type, index), (proc, _) in procs.items():
                    state = "running" if proc.poll() is None else f"exited {proc.returncode}"
                    line = _last_line(os.path.join(log_dir, f"{task_type}{index}.log"))[:100]
                    printer(f"[{task_type}{index}] {state}: {line}", flush=True)
        code = chief.returncode
    except KeyboardInterrupt:
        printer("interrupted: stopping every task", flush=True)
        code = 130
    finally:
        for proc, log in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    for task_type, index in tasks:
        proc = procs[(task_type, index)][0]
        if task_type != "ps" and proc.returncode not in (0, -signal.SIGTERM):
            printer(f"[{task_type}{index}] exited {proc.returncode}; see {log_dir}/{task_type}{index}.log",
                    flush=True)
    printer(_last_line(os.path.join(log_dir, "chief0.log")), flush=True)
    return code
