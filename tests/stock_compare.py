"""The stock export's proof without tfps: stock_check.py run in a fresh interpreter (no tfps
import, no tfps library mapped, every op in TensorFlow's registry), its signatures' outputs
compared with the tfps-format export's, run in this process, on the same inputs."""
import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from stock_check import run_signatures

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stock_check.py")


def fresh_check(export_dir, inputs, tmp_path):
    """stock_check.py's JSON for export_dir on inputs ({name: array}), from a new interpreter
    whose environment names no tfps path (PYTHONPATH dropped)."""
    npz, out = tmp_path / "stock_inputs.npz", tmp_path / "stock_outputs.json"
    np.savez(npz, **{k: v for k, v in inputs.items() if k != "examples"})
    with tf.io.TFRecordWriter(str(npz) + ".examples") as w:   # serialized Examples: bytes numpy would trim
        for record in inputs.get("examples", []):
            w.write(record)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, CHECK, export_dir, str(npz), str(out)], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def assert_same_scores(tfps_export, stock_export, inputs, tmp_path, signatures=("serving_default",)):
    """The stock export, loaded without tfps, answers every signature of the tfps export (those
    named at least) with its outputs within 1e-6."""
    got = fresh_check(stock_export, inputs, tmp_path)
    assert got["modules"] == [] and got["tfps_mapped"] == [], (got["modules"], got["tfps_mapped"])
    assert got["foreign_ops"] == [] and got["nodes"] > 0
    _, want = run_signatures(tfps_export, inputs)
    assert set(signatures) <= set(want), (signatures, sorted(want))
    assert sorted(got["outputs"]) == sorted(want)
    for key, outputs in want.items():
        assert sorted(got["outputs"][key]) == sorted(outputs), key
        for name, value in outputs.items():
            mine = np.asarray(got["outputs"][key][name])
            if value.dtype.kind in "SO":
                assert mine.tolist() == value.astype(str).tolist(), (key, name)
            else:
                np.testing.assert_allclose(mine, value, rtol=0, atol=1e-6, err_msg=f"{key}/{name}")
    return got
