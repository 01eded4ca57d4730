"""`tfps export --format stock`: a serving SavedModel in stock TensorFlow ops only, which an
unmodified TensorFlow and `tensorflow_model_server` load (tfps.embedding.stock says how a table
is kept). The model as trained (tfps's tables), its dense state restored from the checkpoint by
its StateSaver (which checks it and its deltas first), gives every variable's value; the tables'
rows go straight from the checkpoint and its deltas to the SavedModel's variables, one table at
a time (tfps.runner.export_rows). The model again over stock tables, given those values, is what
the SavedModel holds, with the same signatures as the tfps format's export and a warm-up file of
real requests (assets.extra/tf_serving_warmup_requests, TF Serving's PredictionLog records)."""
import os

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


def trained_dense(model_fn, params, inputs_fn, settings, checkpoint):
    """({variable name: value}, [(step, prefix)] delta chain, [(table name, dim)]) of the model at
    `checkpoint`: its dense state only, restored and checked by the model's StateSaver (the
    tables' rows are read by tfps.runner.export_rows, never into a table here)."""
    from tfps.state import manifest as manifests
    from tfps.state.saver import StateSaver
    with tf.Graph().as_default() as graph:
        inputs = inputs_fn()
        features = inputs.features if isinstance(inputs, ServingInputs) else inputs
        _, scaffold, _, _ = build(model_fn, params, ModeKeys.PREDICT, settings, features=dict(features))
        if not isinstance(scaffold.saver, StateSaver):
            raise ValueError("stock export: the model_fn brings its own Saver; export it with --format tfps")
        variables = tf.compat.v1.global_variables()
        tables = [(ev.name, ev.dim) for ev in embedding_variables(graph)]
        with tf.compat.v1.Session(config=settings.config) as session:
            _, chain = scaffold.saver.restore_dense(session, checkpoint)
            restored = {v.op.name for v in manifests.dense_variables(graph).values()}
            values = session.run({v.op.name: v for v in variables if v.op.name in restored})
    return values, chain, tables


def _load_values(session, variables, values, tables):
    """Assigns each variable but the stock tables' its trained value, fed (no constant in the
    graph); a variable without a value is an error naming it."""
    feeds, assigns = {}, []
    held = {id(v) for t in tables.values() for v in (t.keys, t.values)}
    for v in variables:
        if id(v) in held:
            continue
        name = v.op.name
        if name not in values:
            raise ValueError(f"stock export: variable {name!r} of the serving graph is not in the trained model")
        ph = tf.compat.v1.placeholder(v.dtype.base_dtype, name=f"stock_load_{len(assigns)}")
        assigns.append(v.assign(ph, read_value=False) if hasattr(v, "handle") else tf.compat.v1.assign(
            v, ph, validate_shape=False))
        feeds[ph] = values[name]
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
    makes it a new version of an export base path). inputs_fn as for tfps.runner.export.export_saved_model;
    warmup: requests for the warm-up file ({input name: numpy rows} each). The tables are written
    one at a time straight from the checkpoint and its deltas (tfps.runner.export_rows), and each
    index is sized for its rows."""
    from tfps.runner.export_rows import StreamedSaver, TableBundles, write_tables
    values, chain, trained = trained_dense(model_fn, params, inputs_fn, settings, checkpoint)
    with TableBundles(os.path.dirname(os.path.abspath(path))) as bundles:
        write_tables(bundles, checkpoint, chain, trained, stock=True, config=settings.config)
        with tf.Graph().as_default() as graph:
            tables = stock.use_stock_tables(graph, bundles.rows)
            _, _, signatures = serving_graph(model_fn, params, inputs_fn, settings)
            missing = sorted(set(bundles.rows) - set(tables))
            if missing:
                raise ValueError(f"stock export: the serving graph does not read tables {missing}")
            main_op = tf.group(tf.compat.v1.tables_initializer(), tf.compat.v1.local_variables_initializer(),
                               *[t.fill_index() for t in tables.values()], name="stock_main_op")
            saver = tf.compat.v1.train.Saver(sharded=True, save_relative_paths=True)
            held = {id(v) for t in tables.values() for v in (t.keys, t.values)}
            dense = [v for v in tf.compat.v1.global_variables() if id(v) not in held]
            dense_saver = tf.compat.v1.train.Saver(var_list=dense, sharded=False, save_relative_paths=True,
                                                   name="tfps_export_dense") if dense else None
            foreign = foreign_ops(graph.as_graph_def())
            if foreign:
                raise ValueError(f"stock export: the serving graph holds ops that stock TensorFlow lacks: {foreign}")
            builder = tf.compat.v1.saved_model.Builder(path)
            with tf.compat.v1.Session(config=settings.config) as session:
                _load_values(session, tf.compat.v1.global_variables(), values, tables)
                builder.add_meta_graph_and_variables(
                    session, [tf.saved_model.SERVING], signature_def_map=signatures,
                    assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                    main_op=main_op, saver=StreamedSaver(saver, dense_saver, bundles), strip_default_attrs=True)
            builder.save()
    write_warmup(path, warmup)
