"""Run as a script in a fresh interpreter that never imports tfps: loads a stock-format export
the way TF Serving does (tf.compat.v1.saved_model.loader.load, the C++ SavedModel loader), and
writes what the test compares.

  python tests/stock_check.py EXPORT_DIR INPUTS.npz OUT.json

INPUTS.npz: the `serving_default` signature's inputs (arrays named as its inputs) and, when the
export has the Classify and Regress signatures, `examples` (serialized tf.train.Examples).
OUT.json: {"tfps_mapped": [mapped tfps libraries], "foreign_ops": [ops of the graph or its
functions that this TensorFlow's registry lacks], "nodes": count, "outputs": {signature:
{output: nested list}}}. tfps's own modules are never imported here: the check is that this
TensorFlow alone runs the model."""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402


def tfps_libraries():
    """The files mapped into this process whose name has "tfps" (its op library, its core)."""
    with open("/proc/self/maps") as f:
        paths = {line.split(maxsplit=5)[5].strip() for line in f if len(line.split(maxsplit=5)) == 6}
    return sorted(p for p in paths if "tfps" in os.path.basename(p).lower())


def main(export_dir, inputs_path, out_path):
    assert "tfps" not in sys.modules, "tfps must not be imported in the stock check"
    inputs = dict(np.load(inputs_path, allow_pickle=False))
    out = {"outputs": {}}
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, [tf.saved_model.SERVING], export_dir)
        graph_def = meta.graph_def
        nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
        functions = {f.signature.name for f in graph_def.library.function}
        out["nodes"] = len(nodes)
        out["foreign_ops"] = sorted({n.op for n in nodes if n.op not in functions and op_def_registry.get(n.op) is None})
        for key, signature in meta.signature_def.items():
            if key == "__saved_model_init_op":
                continue
            feeds = {}
            for name, info in signature.inputs.items():
                source = "examples" if info.dtype == tf.string.as_datatype_enum else name
                if source not in inputs:
                    break
                feeds[info.name] = inputs[source]
            else:
                fetches = {name: info.name for name, info in signature.outputs.items()}
                got = session.run(fetches, feeds)
                out["outputs"][key] = {k: (v.astype(str) if v.dtype.kind in "SO" else v).tolist()
                                       for k, v in got.items()}
    out["tfps_mapped"] = tfps_libraries()
    out["modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "tfps")
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
