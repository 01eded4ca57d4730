"""Run as a script in a fresh interpreter that never imports tfps: loads a stock-format export
the way TF Serving does (tf.compat.v1.saved_model.loader.load, the C++ SavedModel loader), and
writes what the test compares.

  python tests/stock_check.py EXPORT_DIR INPUTS.npz OUT.json

INPUTS.npz: the `serving_default` signature's inputs (arrays named as its inputs); INPUTS.npz.examples,
a TFRecord file of serialized tf.train.Examples (the Classify and Regress signatures' input).
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


def run_signatures(export_dir, inputs):
    """(meta graph, {signature: {output: array}}) of the SavedModel at export_dir, loaded by
    tf.compat.v1.saved_model.loader.load, each signature run on `inputs` (skipped when an input
    is missing)."""
    outputs = {}
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, [tf.saved_model.SERVING], export_dir)
        for key, signature in meta.signature_def.items():
            feeds = {}
            for name, info in signature.inputs.items():
                source = "examples" if info.dtype == tf.string.as_datatype_enum else name
                if source not in inputs:
                    break
                feeds[info.name] = inputs[source]
            else:
                fetches = {name: info.name for name, info in signature.outputs.items()}
                outputs[key] = session.run(fetches, feeds)
    return meta, outputs


def main(export_dir, inputs_path, out_path):
    assert "tfps" not in sys.modules, "tfps must not be imported in the stock check"
    inputs = dict(np.load(inputs_path, allow_pickle=False))
    examples = list(tf.compat.v1.io.tf_record_iterator(inputs_path + ".examples"))
    if examples:
        inputs["examples"] = np.array(examples, dtype=object)
    meta, outputs = run_signatures(export_dir, inputs)
    graph_def = meta.graph_def
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    functions = {f.signature.name for f in graph_def.library.function}
    out = {"nodes": len(nodes),
           "foreign_ops": sorted({n.op for n in nodes if n.op not in functions and op_def_registry.get(n.op) is None}),
           "outputs": {key: {k: (v.astype(str) if v.dtype.kind in "SO" else v).tolist() for k, v in got.items()}
                       for key, got in outputs.items()},
           "tfps_mapped": tfps_libraries(),
           "modules": sorted(m for m in sys.modules if m.split(".")[0] == "tfps")}
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
