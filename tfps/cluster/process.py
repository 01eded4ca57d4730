"""A task's process for `tfps launch`: started exec'd (subprocess.Popen) or forked (fork_task),
dying with the launcher (prctl PR_SET_PDEATHSIG), in its memory cgroup when it has a cap
(tfps.cluster.cgroups) and, with emulated hosts, in its own network namespace; reaped with
os.wait4, so that the launcher gets each run's rusage (Child.on_exit).
With timestamps (what the launcher asks), every line the task's Python code writes to its log
starts with the time (timestamped)."""
import argparse
import datetime
import io
import logging
import os
import re
import runpy
import signal
import subprocess
import sys
import time
import traceback
import warnings

from tfps.cluster.cgroups import join as join_cgroup
from tfps.cluster.netns import LIBC, enter as enter_netns

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def die_with_parent(parent):
    """A function that asks the kernel to SIGKILL the calling process when the launcher `parent`
    dies (and exits 1 at once if it is already gone, in case it died before the request was in
    place), for a forked task or main() below. Linux only (prctl); elsewhere, None."""
    if not sys.platform.startswith("linux"):
        return None

    def set_up():
        LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
    return set_up


def exec_argv(parent, module, args, netns_path=None, timestamps=False, cgroup=None):
    """The command line of an exec'd task: `python -m <module> <args>`, started through this
    module's main(), which makes it die with `parent`, with cgroup (a cgroup.procs file) moves it
    into that memory cgroup and, with netns_path, into that network namespace, before the module
    runs. No preexec_fn: a fork of the launcher that runs Python (or the C library's fork
    handlers) before its exec can hang when the launcher has threads (gRPC's, TensorFlow's);
    without one, subprocess execs from vfork. timestamps: each line the task writes starts with
    the time (timestamped)."""
    return ([sys.executable, "-m", "tfps.cluster.process", "--parent", str(parent)]
            + (["--cgroup", cgroup] if cgroup else []) + (["--netns", netns_path] if netns_path else [])
            + (["--timestamps"] if timestamps else [])
            + ["--", module, *args])


STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")   # what a task's log line starts with


class _Stamped(io.TextIOBase):
    """A text stream that starts every line written to it with the local time (`2026-12-06
    02:50:01.123 `, STAMP) and passes it on to `stream`."""

    def __init__(self, stream):
        super().__init__()
        self._stream, self._line_start = stream, True

    def write(self, text):
        pieces = []
        for piece in text.splitlines(keepends=True):
            if self._line_start:
                pieces.append(datetime.datetime.now().isoformat(" ", "milliseconds") + " ")
            pieces.append(piece)
            self._line_start = piece.endswith(("\n", "\r"))
        self._stream.write("".join(pieces))
        return len(text)

    def flush(self):
        self._stream.flush()

    def fileno(self):
        return self._stream.fileno()

    def isatty(self):
        return False

    @property
    def encoding(self):
        return self._stream.encoding


def timestamped(own_fds=False):
    """Makes sys.stdout and sys.stderr stamp each line with the time (a task's log), and points
    the logging handlers that write to them (TensorFlow's, made at its import) at the stamped
    streams. own_fds (a forked task): they write to fds 1 and 2 themselves, whatever the
    launcher's sys.stdout was (a test's capture, say). Native code writing to fd 1 or 2 directly
    keeps its own format."""
    replaced = {}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if not isinstance(stream, _Stamped):
            target = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                                       errors="backslashreplace", line_buffering=True) if own_fds else stream)
            replaced[id(stream)] = _Stamped(target)
            setattr(sys, name, replaced[id(stream)])
    loggers = [logging.getLogger()] + [v for v in logging.Logger.manager.loggerDict.values()
                                       if isinstance(v, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in replaced:
                handler.setStream(replaced[id(stream)])


def untimestamped(line):
    """A task's log line without its time stamp."""
    return STAMP.sub("", line, count=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description="runs a module of tfps as a task of a launcher (exec_argv)")
    parser.add_argument("--parent", type=int, required=True, help="the launcher's pid: SIGKILL when it dies")
    parser.add_argument("--cgroup", help="the cgroup.procs file of the memory cgroup to run in")
    parser.add_argument("--netns", help="the network namespace (a file under /run/netns) to run in")
    parser.add_argument("--timestamps", action="store_true", help="start each line written with the time")
    parser.add_argument("module")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    set_up = die_with_parent(args.parent)   # (exits 1 when the launcher is already gone)
    if set_up is not None:
        set_up()
    if args.cgroup:
        join_cgroup(args.cgroup)   # before the module's imports: all it allocates counts against its cap
    if args.netns:
        fd = os.open(args.netns, os.O_RDONLY | os.O_CLOEXEC)
        enter_netns(fd)   # one thread here: every thread and socket of the task is in it
        os.close(fd)
    if args.timestamps:
        timestamped()
    sys.argv = [args.module, *args.args]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


class Child:
    """A task's process, forked or exec'd (a subprocess.Popen's pid), as much of Popen as the
    launcher uses. Reaped with os.wait4: on_exit gets the run's rusage (its CPU and its reaped
    children's)."""

    def __init__(self, pid, popen=None, on_exit=None):
        self.pid, self.returncode = pid, None
        self._popen, self.on_exit = popen, on_exit

    def poll(self):
        if self.returncode is None:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)   # -N for a signal, as Popen
                if self._popen is not None:
                    self._popen.returncode = self.returncode           # reaped here: Popen must not wait
                if self.on_exit is not None:
                    self.on_exit(rusage)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def fork_task(task_main, argv, env, log, parent, name, signals, netns_fd=None, close_fds=(), err=None,
              timestamps=False, cgroup=None):
    """Forks a child that runs task_main(argv) with env as its environment and log as its stdout
    and stderr, and exits with its code (1 and the traceback for an exception). `signals`:
    {signal: the disposition the child gets} (what the launcher itself was started with), set
    while both are blocked, so no signal reaches the child's copy of the launcher's handlers.
    The child's name (ps, top) is `name`. With cgroup (a cgroup.procs file), the child moves into
    that memory cgroup first of all: what it allocates (and copies of the launcher's pages it
    writes) counts against its cap. With netns_fd, the child moves into that network namespace
    (it has one thread then: every thread it starts is there too); close_fds are the launcher's
    that it must not keep (the netns keeper's pipe). err: a file of its own for the child's
    stderr (default: log). timestamps: each line the child's Python code writes starts with the
    time (timestamped)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()   # else the child would print the launcher's buffered lines again
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, list(signals))
    with warnings.catch_warnings():   # 3.12+: numpy's idle BLAS thread makes fork() warn; the child uses none
        warnings.filterwarnings("ignore", message=".*multi-threaded.*fork", category=DeprecationWarning)
        try:
            pid = os.fork()
        except OSError:   # no process to be had: the launcher's signals as they were
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return Child(pid)
    code = 1
    try:
        os.dup2(log.fileno(), 1)   # first: whatever fails below is in the task's log, not the launcher's terminal
        os.dup2((log if err is None else err).fileno(), 2)
        if cgroup is not None:
            join_cgroup(cgroup)
        if netns_fd is not None:
            enter_netns(netns_fd)
        for fd in close_fds:
            os.close(fd)
        for sig, disposition in signals.items():
            if disposition is not None:   # (None: not set from Python; left as it is)
                signal.signal(sig, disposition)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        set_up = die_with_parent(parent)
        if set_up is not None:
            set_up()
            LIBC.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
        os.environ.clear()
        os.environ.update(env)
        if timestamps:
            timestamped(own_fds=True)
        sys.argv = ["tfps"] + list(argv)
        code = task_main(list(argv))
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 -- what a process's top level does: the traceback, exit 1
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 -- exiting either way
                pass
        os._exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
