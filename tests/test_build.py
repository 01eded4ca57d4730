"""BUILD is true: it is what setup.py (the build of record) renders from its sources and flags,
and the Makefile's C++ tests build every source BUILD's core_test globs."""
import glob
import importlib.util
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup():
    spec = importlib.util.spec_from_file_location("tfps_setup", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)   # setup() itself runs only under __main__
    return module


def test_build_is_what_setup_py_renders():
    setup = _setup()
    with open(os.path.join(ROOT, "BUILD")) as f:
        assert f.read() == setup.render_build(), "BUILD is stale: run `python setup.py build_file`"
    build = setup.render_build()
    for flag in setup.OPT_FLAGS:   # the op library's optimization flags are all there
        assert build.count(f'"{flag}"') >= 2, flag


def test_the_makefile_builds_every_cc_test_source():
    """What make would run for the two sanitizer binaries (`make -n -B`): each one g++ of every
    kernels/core and tests/cc source, linked with GoogleTest's main and oneTBB into its binary."""
    plan = subprocess.run(["make", "-n", "-B", "build/cc/core_asan", "build/cc/core_tsan"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr[-2000:]
    sources = {os.path.relpath(p, ROOT) for d in ("kernels/core", "tests/cc")
               for p in glob.glob(os.path.join(ROOT, d, "*.cc"))}
    for binary, flag in (("core_asan", "-fsanitize=address,undefined"), ("core_tsan", "-fsanitize=thread")):
        (line,) = [cmd for cmd in plan.stdout.replace("\\\n", " ").splitlines() if f"-o build/cc/{binary} " in cmd]
        words = line.split()
        assert words[0] == "g++" and flag in words and sources <= set(words), sorted(sources - set(words))
        assert words[-3:] == ["-lgtest_main", "-lgtest", "-ltbb"], words[-3:]   # GoogleTest's main, and oneTBB