"""`tfps export --format stock`: a serving SavedModel in stock TensorFlow ops only, which an
unmodified TensorFlow and `tensorflow_model_server` load (tfps.embedding.stock says how a table
is kept). Two graphs: the model as trained (tfps's tables), restored from the checkpoint by its
StateSaver (which checks it first), gives every table's rows and every variable's value; the
model again over stock tables, given those values, is what the SavedModel holds, with the same
signatures as the tfps format's export and a warm-up file of real requests
(assets.extra/tf_serving_warmup_requests, TF Serving's PredictionLog records)."""
import os

import numpy as np
import tensorflow as tf

from tfps.embedding import stock
from tfps.embedding.variable import embedding_variables
from tfps.models.spec import ModeKeys
from tfps.runner.serving_inputs import ServingInputs, serving_graph
from tfps.runner.graph import build

WARMUP_FILE = "tf_serving_warmup_requests"


def foreign_ops(graph_def):
    """Sorted op names of graph_def's nodes and its functions' nodes that TensorFlow's own op
    registry lacks (tfps's ops, registered in this process by its library, all start with Tfps)."""
    from tensorflow.python.framework import op_def_registry
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    functions = {f.signature.name for f in graph_def.library.function}
    return sorted({n.op for n in nodes if n.op not in functions
                   and (n.op.startswith("Tfps") or op_def_registry.get(n.op) is None)})


def trained_state(model_fn, params, inputs_fn, settings, checkpoint):
    """({variable name: value}, {table name: (keys, values)}) of the model at `checkpoint`."""
    with tf.Graph().as_default() as graph:
        inputs = inputs_fn()
        features = inputs.features if isinstance(inputs, ServingInputs) else inputs
        _, scaffold, _, _ = build(model_fn, params, ModeKeys.PREDICT, settings, features=dict(features))
        variables = tf.compat.v1.global_variables()
        tables = embedding_variables(graph)
        exported = [ev.export() for ev in tables]
        with tf.compat.v1.Session(config=settings.config) as session:
            scaffold.saver.restore(session, checkpoint)
            values = session.run({v.op.name: v for v in variables})
            rows = session.run([(e["keys"], e["values"]) for e in exported])
    return values, {ev.name: kv for ev, kv in zip(tables, rows)}


def _load_values(session, variables, values, tables, rows):
    """Assigns each variable its trained value and each stock table its rows, fed (no constant
    in the graph); a variable or table without a value is an error naming it."""
    feeds, assigns = {}, []
    for v in variables:
        name = v.op.name
        table = next((t for t in tables.values() if v is t.keys or v is t.values), None)
        if table is not None:
            if table.name not in rows:
                raise ValueError(f"stock export: table {table.name!r} is not in the trained model")
            keys, vals = rows[table.name]
            reserved = np.isin(keys, [stock.EMPTY_KEY, stock.DELETED_KEY])
            if reserved.any():
                raise ValueError(f"stock export: table {table.name!r} holds key {keys[reserved][0]}, which a stock "
                                 f"hash table reserves; export it with --format tfps")
            value = keys if v is table.keys else np.concatenate([np.zeros([1, table.dim], np.float32), vals])
        elif name in values:
            value = values[name]
        else:
            raise ValueError(f"stock export: variable {name!r} of the serving graph is not in the trained model")
        ph = tf.compat.v1.placeholder(v.dtype.base_dtype, name=f"stock_load_{len(assigns)}")
        assigns.append(v.assign(ph, read_value=False) if hasattr(v, "handle") else tf.compat.v1.assign(
            v, ph, validate_shape=False))
        feeds[ph] = value
    session.run(assigns, feeds)


def write_warmup(path, requests, model_name="model"):
    """Writes path/assets.extra/tf_serving_warmup_requests: one PredictionLog per request, each a
    PredictRequest of the `serving_default` signature from {input name: numpy rows}."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    os.makedirs(os.path.join(path, "assets.extra"), exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(path, "assets.extra", WARMUP_FILE)) as writer:
        for rows in requests:
            request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(
                name=model_name, signature_name=tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY))
            for name, value in rows.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def write_stock_saved_model(model_fn, params, inputs_fn, settings, path, checkpoint, warmup=()):
    """Writes a stock-ops SavedModel of `checkpoint` at `path` (tfps.runner.export.export_with_manifest
    makes it a new version of an export base path). inputs_fn as for tfps.runner.export.export_saved_model; warmup: requests for the
    warm-up file ({input name: numpy rows} each)."""
    values, rows = trained_state(model_fn, params, inputs_fn, settings, checkpoint)
    with tf.Graph().as_default() as graph:
        tables = stock.use_stock_tables(graph)
        _, _, signatures = serving_graph(model_fn, params, inputs_fn, settings)
        missing = sorted(set(rows) - set(tables))
        if missing:
            raise ValueError(f"stock export: the serving graph does not read tables {missing}")
        main_op = tf.group(tf.compat.v1.tables_initializer(), tf.compat.v1.local_variables_initializer(),
                           *[t.fill_index() for t in tables.values()], name="stock_main_op")
        saver = tf.compat.v1.train.Saver(sharded=True, save_relative_paths=True)
        foreign = foreign_ops(graph.as_graph_def())
        if foreign:
            raise ValueError(f"stock export: the serving graph holds ops that stock TensorFlow lacks: {foreign}")
        builder = tf.compat.v1.saved_model.Builder(path)
        with tf.compat.v1.Session(config=settings.config) as session:
            _load_values(session, tf.compat.v1.global_variables(), values, tables, rows)
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.SERVING], signature_def_map=signatures,
                assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                main_op=main_op, saver=saver, strip_default_attrs=True)
        builder.save()
    write_warmup(path, warmup)
