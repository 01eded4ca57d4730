import json
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pytest  # noqa: E402

from tfps.process import import_tensorflow  # noqa: E402

# TensorFlow's C++ warnings are on in the test processes themselves (level 1; TensorFlow reads the
# level once, when it is imported) for one of them: an op changed after a session ran it, which
# TensorFlow only warns of (MUTATION). It fails the test (pytest_runtest_makereport, the cli
# fixture; test_docs checks the blocks it runs). The processes the tests start log at the level
# of the environment (2 unless set), as tfps's commands do.
MUTATION = "This mutation will have no effect"
_LEVEL = os.environ["TF_CPP_MIN_LOG_LEVEL"]
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0" if _LEVEL == "0" else "1"
tf = import_tensorflow()   # as tfps's commands import it: the collector paused, then frozen
os.environ["TF_CPP_MIN_LOG_LEVEL"] = _LEVEL

tf.compat.v1.disable_eager_execution()

_UNGROUPED = pytest.StashKey[set]()   # tests whose xdist_group pytest-xdist did not apply

try:
    HAS_ESTIMATOR = hasattr(tf.estimator, "Estimator")
except (AttributeError, ImportError):   # no tf.estimator, or tensorflow-estimator not installed
    HAS_ESTIMATOR = False


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` (clusters, processes, long training) run first: pytest-xdist hands tests
    out in this order, so the long ones start early and the short ones fill the workers at the end,
    instead of one long test running alone at the end of the suite.

    Tests marked `estimator` need tf.estimator (TensorFlow 2.15): on a TensorFlow without it they
    are reported skipped, with the reason (`make test TF=2.15` runs them)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)   # stable: file order within each
    if HAS_ESTIMATOR:
        return
    skip = pytest.mark.skip(reason=f"needs tf.estimator, which TensorFlow {tf.__version__} does not have: "
                                   f"`make test TF=2.15` runs it")
    for item in items:
        if item.get_closest_marker("estimator") is not None:
            item.add_marker(skip)


def _cpu_seconds():
    """CPU seconds of this process, of its children it reaped, and of its live children (with
    what they reaped: the forker's runs, a launcher's tasks), from /proc."""
    me, total = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()   # from the state on: ppid, ..., utime at 11
        except OSError:
            continue   # gone meanwhile
        if int(entry) == me or int(fields[1]) == me:
            total += sum(int(v) for v in fields[11:15])   # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TFPS_TEST_CPU=<file>, each test's CPU seconds (setup, call, teardown; its processes'
    too), wall seconds, start time and pytest-xdist worker are appended to <file> as a JSON line:
    where the suite's CPU goes, which --durations cannot say when the workers share the cores,
    and when each worker was busy."""
    path = os.environ.get("TFPS_TEST_CPU")
    if not path:
        yield
        return
    cpu, wall = _cpu_seconds(), time.time()
    yield
    with open(path, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "cpu_s": round(_cpu_seconds() - cpu, 2),
                            "wall_s": round(time.time() - wall, 2), "start": round(wall, 2),
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")


def pytest_collection_finish(session):
    """Under `--dist loadgroup` (make test), the tests of one xdist_group share a worker and so
    their session fixture (a trained model, an uninterrupted run): pytest-xdist marks them by a
    suffix of the node id. A pytest that drops that suffix (9.2 with xdist 3.6-3.8) would run each
    such fixture once per worker: those tests fail instead (pytest_runtest_setup), saying why."""
    session.config.stash[_UNGROUPED] = {
        item.nodeid for item in session.items if getattr(session.config.option, "loadgroup", False)
        and item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid}


def pytest_runtest_setup(item):
    if item.nodeid in item.config.stash.get(_UNGROUPED, ()):
        pytest.fail("pytest-xdist did not group this test by its xdist_group mark under --dist loadgroup: "
                    "pytest and pytest-xdist disagree (requirements/common.txt pins a pair that works)")


@pytest.fixture
def graph():
    """A fresh default graph for graph-mode tests."""
    g = tf.Graph()
    with g.as_default():
        yield g


@pytest.fixture
def cli(capfd, monkeypatch):
    """tfps's command line in this process: cli(*argv, env={...}) -> (exit code, stdout, stderr),
    captured at the file descriptors (TF's C++ errors and logger output included; its C++ warnings
    and info, which this process logs for the mutation check, left out, as TF_CPP_MIN_LOG_LEVEL=2
    leaves them out of a command's). A subprocess costs a TensorFlow import; a run whose signal or
    process exit matters still needs one."""
    from tfps.cli import main

    def run(*argv, env=None):
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capfd.readouterr()
        before = dict(os.environ)   # what main() sets for its own tasks stays out of later tests
        try:
            code = main(list(argv))
        except SystemExit as e:   # argparse's usage errors
            code = e.code
        finally:
            for key in env or {}:
                monkeypatch.delenv(key, raising=False)
            for key in set(os.environ) - set(before):
                del os.environ[key]
        out, err = capfd.readouterr()
        _fail_on_mutation(err)
        return code, out, _TF_WARNING_OR_INFO.sub("", err)   # what level 2 leaves out of a command's
    return run


# A message of TensorFlow's C++ log at level W or I (2.21's absl format; 2.15's own), with the
# indented lines that continue it (an error's `[[{{node ...}}]]`).
_TF_WARNING_OR_INFO = re.compile(
    r"^(?:[WI]\d{4} [\d:.]+ +\d+|\d{4}-\d\d-\d\d [\d:.]+: [WI]) \S+:\d+\] .*(?:\n[ \t].*)*\n?", re.M)


def _mutations(text):
    return [line for line in text.splitlines() if MUTATION in line]


def _mutation_message(lines):
    return ("TensorFlow warned that an op was changed after a session ran it (the change has no effect: "
            "make the op before a session runs the graph):\n" + "\n".join(lines))


def _fail_on_mutation(err):
    lines = _mutations(err)
    if lines:
        pytest.fail(_mutation_message(lines), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test (its setup, call or teardown) during which TensorFlow warned of a graph mutation in
    this process (its stderr, as pytest captured it) fails, naming the op."""
    report = (yield).get_result()
    lines = [line for name, text in report.sections if name == f"Captured stderr {report.when}"
             for line in _mutations(text)]
    if lines and not report.failed:
        report.outcome = "failed"
        report.longrepr = _mutation_message(lines)


@pytest.fixture(scope="session")
def forker():
    """A process of this worker's that has TensorFlow and tfps imported: `tfps` runs as its forks
    (tests/forker.py), each a process of its own without a TensorFlow import (4 CPU-s saved per
    run). For runs whose own start does not matter: the launcher's lifecycle tests start real
    processes."""
    from forker import Forker
    f = Forker(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    yield f
    f.close()


# Module fixtures shared by several test files are defined here, once: a session fixture that a
# test file imports from another is a definition of that file's, built again for it.
@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """test_serve.py's model: trained 40 steps, exported as a version; the rows and
    tfps.runner.predict's scores (test_serve.trained_model)."""
    from test_serve import trained_model
    return trained_model(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    """The serve_runner files' models: exports at steps 20 and 40, and rows (serve_models.runner_models)."""
    from serve_models import runner_models
    return runner_models(tmp_path_factory.mktemp("serve_runner"))
