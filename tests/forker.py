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
    err = open(req["err"], "a") if req.get("err") else None   # stderr apart from stdout, if asked
    with open(req["out"], "a") as log:   # the run's own stdout (and stderr)
        run = fork_task(tfps.cli.main, req["argv"], dict(os.environ, **req["env"]), log, os.getpid(), "tfps-test-run",
                        {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}, err=err)
    if err is not None:
        err.close()
    runs[run.pid] = run
    print(json.dumps({"pid": run.pid}), flush=True)
"""


class Run:
    """One forked `tfps` run: its pid, its output file(s), and Popen's poll/wait/kill/communicate."""

    def __init__(self, forker, pid, out, err=None):
        self._forker, self.pid, self.out, self.err, self.returncode = forker, pid, out, err, None

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

    def communicate(self, timeout):
        """As Popen.communicate: waits for the end (TimeoutExpired after timeout seconds) and
        returns (stdout, stderr) as text (stderr is "" when it went to the same file)."""
        if self.wait(timeout) is None:
            raise subprocess.TimeoutExpired(f"tfps run {self.pid}", timeout)
        return self.output(), self.errors()

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

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

    def errors(self):
        if self.err is None:
            return ""
        with open(self.err) as f:
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

    def start(self, argv, out, err=None, env=None):
        """`tfps <argv>` in a fork, its stdout and stderr to the file out, or its stderr to the
        file err if given (each made empty here, so it exists before the fork writes to it); env:
        variables set for the run on top of the suite's environment."""
        for path in (out, err):
            if path is not None:
                open(path, "w").close()
        request = {"op": "run", "argv": list(argv), "out": str(out), "err": err and str(err), "env": env or {}}
        run = Run(self, self._ask(request)["pid"], out, err)
        self._runs.append(run)
        return run

    def run(self, argv, log, timeout, env=None):
        """As subprocess.run(capture_output=True, text=True): `tfps <argv>` to its end (killed, and
        TimeoutExpired, after timeout seconds); its stdout and stderr are also kept in the files
        <log>.out and <log>.err."""
        run = self.start(argv, f"{log}.out", f"{log}.err", env)
        try:
            out, err = run.communicate(timeout)
        except subprocess.TimeoutExpired:
            run.kill()
            raise
        return subprocess.CompletedProcess(["tfps", *argv], run.returncode, out, err)

    def close(self):
        for run in self._runs:   # a run a failed test left going
            if run.returncode is None:
                run.kill()
        self._server.stdin.close()
        self._server.kill()
        self._server.wait()
