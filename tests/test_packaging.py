"""A built wheel carries the op library and works away from the source tree; `tfps[serve]`
brings the serving API `tfps serve` imports."""
import json
import os
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
    # pip install tfps[serve]: the serving API at the version this venv runs `tfps serve` with
    from importlib import metadata
    serving = metadata.version("tensorflow-serving-api")
    assert "Provides-Extra: serve" in meta.splitlines()
    assert any(line.startswith(f"Requires-Dist: tensorflow-serving-api=={serving}") and 'extra == "serve"' in line
               for line in meta.splitlines()), meta
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
