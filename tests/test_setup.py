"""setup.py's requirements: one TensorFlow, the line's pins, no tensorflow-serving-api (its own
requirement is the full `tensorflow` distribution), and the grpcio-tools the serving API is
generated with named alike in requirements/ and pyproject.toml. (A built wheel's metadata:
test_packaging; installs into fresh venvs: .ci/check_install.py, in CI.)"""
import os
import re
from importlib import metadata

from test_build import ROOT, _setup


def _name(requirement):
    return re.split(r"[\s;<>=!~(\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _line():
    return ".".join(metadata.version("tensorflow-cpu").split(".")[:2])


def test_the_wheel_requires_one_tensorflow_and_the_lines_pins():
    setup = _setup()
    requires = setup.install_requires() + [r for extra in setup.extras_require().values() for r in extra]
    names = [_name(r) for r in requires]
    assert "serve" in setup.extras_require()
    assert "tensorflow" not in names and "tensorflow-serving-api" not in names, requires
    assert f"tensorflow-cpu=={metadata.version('tensorflow-cpu')}" in requires
    with open(os.path.join(ROOT, "requirements", f"tf-{_line()}.txt")) as f:
        pins = [p.split("#")[0].strip() for p in f if "==" in p.split("#")[0]]
    assert pins and all(p in requires for p in pins), (pins, requires)   # numpy, protobuf, ml_dtypes ...
    assert len(names) == len(set(names)), requires


def test_grpcio_tools_is_pinned_alike_and_grpcio_is_as_new():
    """The serving API's gRPC code refuses a grpcio older than the grpcio-tools that generated it."""
    setup = _setup()
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        (isolated,) = re.findall(r'"grpcio-tools==([^"]+)"', f.read())
    with open(os.path.join(ROOT, "requirements", "serving-2.21.txt")) as f:
        assert re.search(r"^grpcio-tools==(\S+)", f.read(), re.M).group(1) == isolated   # the default line's
    tools = setup._grpcio_tools(_line())
    assert f"grpcio>={tools},<2" in setup.install_requires()
    assert metadata.version("grpcio-tools") == tools
