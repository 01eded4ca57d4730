"""tfps.cluster.process: how `tfps launch` starts an exec'd task (exec_argv -> main): the module
gets its arguments as given, dies with the launcher (the kernel's PR_GET_PDEATHSIG), and does not
run at all when the launcher is already gone; every line a task writes starts with the time,
forked or exec'd."""
import datetime
import json
import os
import signal
import subprocess
import sys

from tfps.cluster.process import STAMP, exec_argv, fork_task, untimestamped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ECHO = """import ctypes, json, os, sys
sig = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(2, ctypes.byref(sig))   # PR_GET_PDEATHSIG
print(json.dumps({"argv": sys.argv[1:], "ppid": os.getppid(), "pdeathsig": sig.value, "name": __name__}))
"""


def _run(tmp_path, parent, args):
    (tmp_path / "echo_argv.py").write_text(ECHO)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    return subprocess.run(exec_argv(parent, "echo_argv", args), env=env, capture_output=True, text=True, timeout=60)


def test_the_module_gets_its_arguments_and_dies_with_the_launcher(tmp_path):
    args = ["train", "--config", "configs/demo.yaml", "--set", "a=b", "--", "-h", "--parent", "7"]
    out = _run(tmp_path, os.getpid(), args)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got == {"argv": args, "ppid": os.getpid(), "pdeathsig": int(signal.SIGKILL), "name": "__main__"}


def test_a_task_whose_launcher_is_gone_does_not_run(tmp_path):
    out = _run(tmp_path, 1 if os.getpid() != 1 else 2, ["train"])   # not this child's parent
    assert out.returncode == 1 and out.stdout == "", (out.returncode, out.stdout, out.stderr)


LINES = """import logging, sys
handler = logging.StreamHandler(sys.stderr)   # made after the streams were stamped (TF's, on import)
logging.getLogger("t").addHandler(handler)
print("one\\ntwo", flush=True)
sys.stdout.write("three ")
sys.stdout.write("still three\\n")
logging.getLogger("t").warning("four")
"""


def _stamps_and_lines(text):
    """[(time, line)] of a task's output: every line must carry a stamp."""
    out = []
    for line in text.splitlines():
        assert STAMP.match(line), line
        out.append((datetime.datetime.fromisoformat(line[:23]), untimestamped(line)))
    return out


def test_an_execd_tasks_lines_each_start_with_the_time(tmp_path):
    (tmp_path / "lines.py").write_text(LINES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    t0 = datetime.datetime.now().replace(microsecond=0)
    out = subprocess.run(exec_argv(os.getpid(), "lines", [], timestamps=True), env=env, capture_output=True, text=True, timeout=60)
    t1 = datetime.datetime.now()
    assert out.returncode == 0, out.stderr
    got = _stamps_and_lines(out.stdout) + _stamps_and_lines(out.stderr)
    assert [line for _, line in got] == ["one", "two", "three still three", "four"]
    assert all(t0 <= t <= t1 for t, _ in got), (t0, got, t1)


def test_a_forked_tasks_lines_each_start_with_the_time_and_a_handler_made_before_follows(tmp_path):
    import logging
    made_before = logging.getLogger("tfps_test_before")
    made_before.addHandler(logging.StreamHandler(sys.stderr))   # as TensorFlow's, made at its import

    def task_main(argv):
        print("hello", argv[0], flush=True)
        made_before.warning("from a handler made before the fork")
        return 0
    log = open(tmp_path / "task.log", "w")
    child = fork_task(task_main, ["x"], dict(os.environ), log, os.getpid(), "tfps-test", {},
                       timestamps=True)
    assert child.wait(timeout=60) == 0
    log.close()
    got = _stamps_and_lines((tmp_path / "task.log").read_text())
    assert [line for _, line in got] == ["hello x", "from a handler made before the fork"]
