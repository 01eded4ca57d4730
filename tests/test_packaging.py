"""A built wheel carries the op library and works away from the source tree; it carries the
serving API `tfps serve` imports (TF Serving's messages, generated from third_party/) and requires
no second TensorFlow. (Installing it into fresh venvs: .ci/check_install.py, in CI.)"""
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LOOKUP = r"""
import json, os, sys
import numpy as np, tensorflow as tf
import tfps
tf.compat.v1.disable_eager_execution()
ev = tfps.get_embedding_variable("emb", 4, initializer=tf.compat.v1.constant_initializer(0.5))
with tf.compat.v1.Session() as s:
    rows = s.run(tfps.embedding_lookup(ev, tf.constant([1, 2, 1], tf.int64)))
    size = s.run(ev.size())
from tfps import _core   # the TF-free binding ships too
core_rows = _core.Table(2, "constant", 0.25).lookup(np.array([5], np.int64))
print(json.dumps({"file": tfps.__file__, "rows": rows.tolist(), "size": int(size), "core": core_rows.tolist()}))
"""

# Each generated module of the wheel's serving API: the file it was imported from, its descriptor.
SERVING_API = r"""
import importlib, json, os, sys
import tensorflow_serving
root = os.path.dirname(tensorflow_serving.__file__)
out = {}
for package in ("apis", "config"):
    for f in sorted(os.listdir(os.path.join(root, package))):
        if f.endswith(("_pb2.py", "_pb2_grpc.py")):
            module = importlib.import_module(f"tensorflow_serving.{package}.{f[:-3]}")
            out[module.__name__] = [module.__file__, module.DESCRIPTOR.serialized_pb.hex()
                                    if f.endswith("_pb2.py") else None]
print(json.dumps(out))
"""


def test_wheel_installs_and_runs_a_lookup_away_from_the_source_tree(tmp_path):
    wheels = tmp_path / "wheels"
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(wheels), ROOT], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = wheels.glob("tfps-*.whl")
    assert f"-cp{sys.version_info.major}{sys.version_info.minor}-" in wheel.name and "linux" in wheel.name      # a platform wheel, not py3-none-any
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "tfps/_tfps_ops.so" in names and any(n.startswith("tfps/_core.") for n in names)
        import tensorflow as tf
        assert json.loads(z.read("tfps/_build_info.json"))["tensorflow"] == tf.__version__
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = z.read(meta).decode()
    # tfps[serve] installs no second TensorFlow: the wheel names one TensorFlow distribution, the
    # one it was built with, and not tensorflow-serving-api (whose requirement is `tensorflow`).
    from importlib import metadata
    lines = meta.splitlines()
    assert "Provides-Extra: serve" in lines
    requires = [re.split(r"[\s;<>=!~(\[]", line[len("Requires-Dist: "):], maxsplit=1)[0].lower().replace("_", "-")
                for line in lines if line.startswith("Requires-Dist: ")]
    assert [r for r in requires if r in ("tensorflow", "tensorflow-cpu", "tensorflow-serving-api")] == \
        ["tensorflow-cpu"], lines
    assert "tensorflow_serving/apis/prediction_service_pb2_grpc.py" in names
    assert "tensorflow_serving/config/model_server_config_pb2.py" in names
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                          str(wheel)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", LOOKUP], capture_output=True, text=True, timeout=300,
                         cwd=elsewhere, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(site))                    # the installed copy, not the tree
    assert got["rows"] == [[0.5] * 4] * 3 and got["size"] == 2 and got["core"] == [[0.25, 0.25]]
    # Its serving API imports (protobuf and grpcio of this venv), from the wheel, and is
    # tensorflow-serving-api's: the same modules, and on the line whose release third_party/ holds,
    # the same descriptors, byte for byte, as the package this venv's tests serve with.
    out = subprocess.run([sys.executable, "-c", SERVING_API], capture_output=True, text=True, timeout=300,
                         cwd=elsewhere, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    ours = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(path.startswith(str(site)) for path, _ in ours.values()), ours
    import tensorflow_serving   # tensorflow-serving-api, in this venv (make setup)
    upstream = {f"tensorflow_serving.{package}.{f[:-3]}" for package in ("apis", "config")
                for f in os.listdir(os.path.join(os.path.dirname(tensorflow_serving.__file__), package))
                if f.endswith(("_pb2.py", "_pb2_grpc.py"))}
    assert upstream <= set(ours) and all(n in upstream for n in ours if n.endswith("_pb2")), (upstream, ours)
    with open(os.path.join(ROOT, "requirements", "serving-2.21.txt")) as f:
        release = re.search(r"^tensorflow-serving-api==(\S+)", f.read(), re.M).group(1)
    if metadata.version("tensorflow-serving-api") == release:
        import importlib
        for name, (_, descriptor) in ours.items():
            if name.endswith("_pb2"):
                assert importlib.import_module(name).DESCRIPTOR.serialized_pb.hex() == descriptor, name
