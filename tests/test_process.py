"""tfps.cluster.process: how `tfps launch` starts an exec'd task (exec_argv -> main): the module
gets its arguments as given, dies with the launcher (the kernel's PR_GET_PDEATHSIG), and does not
run at all when the launcher is already gone."""
import json
import os
import signal
import subprocess

from tfps.cluster.process import exec_argv

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
