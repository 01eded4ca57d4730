"""BUILD is true: it is what setup.py (the build of record) renders from its sources and flags,
and the Makefile's C++ tests build every source BUILD's core_test globs."""
import glob
import importlib.util
import os
import re

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
    with open(os.path.join(ROOT, "Makefile")) as f:
        makefile = f.read()
    assert "$(wildcard tests/cc/*.cc)" in makefile or all(
        os.path.relpath(p, ROOT) in makefile for p in glob.glob(os.path.join(ROOT, "tests", "cc", "*.cc")))
    assert re.search(r"-o \$@ -ltbb", makefile)
