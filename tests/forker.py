"""`tfps` runs as forks of one process that has TensorFlow and the training modules imported
(tfps.cluster.launch.fork_task, what `tfps launch` does for its tasks): a test that kills trainers at random and resumes them
starts each run without a TensorFlow import (about 3 CPU-seconds). Each run is a process of its
own; SIGKILL it by its pid as any trainer."""
import json
import os
import signal
import subprocess
import sys
import time

_SERVER = r"""
import json, os, signal, sys
import tfps.cli
from tfps.cluster.launch import fork_task
tfps.cli._preload_task()   # imports only: no graph, no TensorFlow thread before a fork
requests = os.fdopen(os.dup(0), "r")
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
runs = {}
for line in requests:
    req = json.loads(line)
    if req["op"] == "poll":
        print(json.dumps({"code": runs[req["pid"]].poll()}), flush=True)
        continue
    with open(req["out"], "a") as log:   # the run's own stdout and stderr
        run = fork_task(tfps.cli.main, req["argv"], dict(os.environ), log, os.getpid(), "tfps-test-run",
                        {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL})
    runs[run.pid] = run
    print(json.dumps({"pid": run.pid}), flush=True)
"""


class Run:
    """One forked `tfps` run: its pid, its output file, and Popen's poll/wait/kill."""

    def __init__(self, forker, pid, out):
        self._forker, self.pid, self.out, self.returncode = forker, pid, out, None

    def poll(self):
        if self.returncode is None:
            self.returncode = self._forker._ask({"op": "poll", "pid": self.pid})["code"]
        return self.returncode

    def wait(self, timeout):
        """The exit code, or None when the run is still going after timeout seconds."""
        deadline = time.time() + timeout
        while self.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        return self.returncode

    def kill(self):
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            while self.poll() is None:
                time.sleep(0.01)

    def first_line(self, timeout=300):
        """The run's first line of output (waits for it, or for the run's end)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.out) as f:
                text = f.read()
            if "\n" in text or self.poll() is not None:
                return text.split("\n", 1)[0]
            time.sleep(0.02)
        raise AssertionError(f"no output from pid {self.pid} in {timeout} s")

    def output(self):
        with open(self.out) as f:
            return f.read()


class Forker:
    """The forking process; its runs die with it (PR_SET_PDEATHSIG, as tfps launch's tasks)."""

    def __init__(self, cwd):
        self._cwd = cwd
        self._runs = []
        self._server = subprocess.Popen([sys.executable, "-c", _SERVER], cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def _ask(self, request):
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"the forking process exited {self._server.wait()}")
        return json.loads(line)

    def start(self, argv, out):
        """`tfps <argv>` in a fork, its stdout and stderr to the file out (made empty here, so it
        exists before the fork writes to it)."""
        open(out, "w").close()
        run = Run(self, self._ask({"op": "run", "argv": list(argv), "out": str(out)})["pid"], out)
        self._runs.append(run)
        return run

    def close(self):
        for run in self._runs:   # a run a failed test left going
            if run.returncode is None:
                run.kill()
        self._server.stdin.close()
        self._server.kill()
        self._server.wait()
