"""A serving SavedModel of a checkpoint, without tf.estimator: the model_fn's PREDICT graph over
placeholders, its variables and tables restored from the checkpoint (by its tfps.state.StateSaver,
which checks the checkpoint against the model first), written by tf.compat.v1.saved_model.Builder
with the `serving_default` signature (raw tensors) and, for a model of rows with probabilities,
the `classification` and `regression` signatures over serialized tf.train.Examples (TF Serving's
Classify and Regress), and the tfps manifest in assets.extra."""
import dataclasses
import json
import os
import shutil
import tempfile
import typing

import tensorflow as tf
from tensorflow.python.saved_model import model_utils

from tfps.data import sequences
from tfps.data.tfrecord import example_features
from tfps.models.spec import ModeKeys
from tfps.runner.graph import build, latest_checkpoint
from tfps.state import manifest as manifests


def serving_inputs(schema):
    """Raw-tensor serving inputs of a schema: dense float32 [None, num_dense], ids int64
    [None, F], each list feature int64 [None, None] (-1 pads). Call in the export's graph."""
    inputs = {"ids": tf.compat.v1.placeholder(tf.int64, [None, len(schema.id_features)], name="ids")}
    if schema.num_dense:
        inputs["dense"] = tf.compat.v1.placeholder(tf.float32, [None, schema.num_dense], name="dense")
    for name in schema.list_features:
        inputs[name] = tf.compat.v1.placeholder(tf.int64, [None, None], name=name)
    return inputs


@dataclasses.dataclass(frozen=True)
class ServingInputs:
    """What the export's signatures take. features: {name: Tensor} the model reads (the
    `serving_default` signature feeds them); examples: string [None] of serialized tf.train.Examples
    that the features default to (the `classification` and `regression` signatures feed it), or None."""
    features: dict
    examples: typing.Optional[tf.Tensor] = None


EXAMPLES_INPUT = "input_example_tensor"   # the Examples placeholder's name (TF Estimator's)


def example_serving_inputs(schema, specs):
    """serving_inputs(schema) that default to the rows of serialized tf.train.Examples with these
    feature specs (tfps.data.tfrecord; what tfps convert writes). Feeding the raw tensors skips
    the parse (Predict); feeding only the Examples parses them, as the TFRecord reader does, into
    the same model inputs (Classify, Regress): one model graph, the same scores. Call in the
    export's graph."""
    examples = tf.compat.v1.placeholder(tf.string, [None], name=EXAMPLES_INPUT)
    parsed = example_features(examples, specs)
    shapes = {"ids": [None, len(schema.id_features)], "dense": [None, schema.num_dense],
              **{name: [None, None] for name in schema.list_features}}
    wanted = ["ids"] + (["dense"] if schema.num_dense else []) + list(schema.list_features)
    missing = [name for name in wanted if name not in parsed]
    if missing or parsed["ids"].shape[1] != len(schema.id_features) or \
            (schema.num_dense and parsed["dense"].shape[1] != schema.num_dense):
        raise ValueError(f"export: the example feature specs {specs} do not make the model's inputs "
                         f"(ids of {len(schema.id_features)}, dense of {schema.num_dense}, lists "
                         f"{list(schema.list_features)})")
    features = {name: tf.compat.v1.placeholder_with_default(parsed[name], shapes[name], name=name) for name in wanted}
    return ServingInputs(features, examples)


def example_signatures(examples, predictions):
    """TF Serving's `classification` (classes "0" and "1", scores 1 - p and p) and `regression`
    (p) signatures over `examples`, from a binary model's probabilities p [B]; {} for a model
    without them."""
    if examples is None or "probabilities" not in (predictions or {}):
        return {}
    p = predictions["probabilities"]
    if p.shape.rank != 1:
        return {}
    with tf.compat.v1.name_scope("example_signatures"):
        scores = tf.stack([1.0 - p, p], axis=1, name="scores")
        classes = tf.tile(tf.constant([["0", "1"]]), [tf.shape(p)[0], 1], name="classes")
    return {"classification": tf.compat.v1.saved_model.classification_signature_def(examples, classes, scores),
            "regression": tf.compat.v1.saved_model.regression_signature_def(examples, p)}


def sequence_serving_inputs():
    """MTGR's serving inputs: each feature of tfps.data.sequences.SPEC but the label and the user,
    with a batch dimension; lists padded with 0 (what padded_batch does) to one length per request."""
    return {name: tf.compat.v1.placeholder(spec.dtype, [None] + spec.shape.as_list(), name=name)
            for name, spec in sequences.SPEC.items() if name not in ("label", "user")}


def export_saved_model(model_fn, params, inputs_fn, settings, export_base, checkpoint=None):
    """Writes export_base/<timestamp>/ (a SavedModel of `checkpoint`, default model_dir's latest
    with its deltas) and returns its path. inputs_fn() makes the placeholders {name: Tensor} the
    signature takes (serving_inputs, sequence_serving_inputs) or a ServingInputs
    (example_serving_inputs: the Examples signatures too)."""
    checkpoint = checkpoint or latest_checkpoint(settings.model_dir)
    if not checkpoint:
        raise ValueError(f"export: no checkpoint in model_dir {settings.model_dir!r}; train first")
    with tf.Graph().as_default():
        inputs = inputs_fn()
        if not isinstance(inputs, ServingInputs):
            inputs = ServingInputs(inputs)
        spec, scaffold, _, _ = build(model_fn, params, ModeKeys.PREDICT, settings, features=dict(inputs.features))
        signatures = model_utils.build_all_signature_defs(inputs.features, spec.export_outputs, serving_only=True)
        signatures.update(example_signatures(inputs.examples, spec.predictions))
        path = model_utils.get_timestamped_export_dir(export_base).decode()
        builder = tf.compat.v1.saved_model.Builder(path)
        with tf.compat.v1.Session(config=settings.config) as session:
            local_init = scaffold.local_init_op if scaffold.local_init_op is not None else \
                tf.compat.v1.train.Scaffold.default_local_init_op()
            saver = scaffold.saver
            saver.restore(session, checkpoint)
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.SERVING], signature_def_map=signatures,
                assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                main_op=local_init, saver=saver, strip_default_attrs=True)
        builder.save()
    return path


FORMATS = ("tfps", "stock")


def export_with_manifest(model_fn, params, inputs_fn, settings, export_dir, export_format="tfps", warmup=()):
    """export_saved_model (export_format "tfps") or tfps.runner.stock_export's
    export_stock_saved_model ("stock": stock ops only, with `warmup` requests) into export_dir,
    given the checkpoint's manifest: exported aside (a directory a server's version poll skips),
    its manifest written, then renamed into export_dir, so a server never sees a version without
    its manifest, and a refused or failed export leaves nothing behind. Returns the version's path."""
    if export_format not in FORMATS:
        raise ValueError(f"export: format must be one of {list(FORMATS)}, got {export_format!r}")
    checkpoint = latest_checkpoint(settings.model_dir)
    if not checkpoint:
        raise ValueError(f"export: no checkpoint in model_dir {settings.model_dir!r}; train first")
    os.makedirs(export_dir, exist_ok=True)
    aside = tempfile.mkdtemp(prefix=".tfps-export-", dir=export_dir)
    try:
        if export_format == "stock":
            from tfps.runner.stock_export import export_stock_saved_model
            made = export_stock_saved_model(model_fn, params, inputs_fn, settings, aside, checkpoint, warmup)
        else:
            made = export_saved_model(model_fn, params, inputs_fn, settings, aside, checkpoint)
        write_export_manifest(made, checkpoint, export_format)
        path = os.path.join(export_dir, os.path.basename(made))
        os.rename(made, path)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return path


def write_export_manifest(export_path, checkpoint, export_format="tfps"):
    """Writes EXPORT/assets.extra/tfps_manifest.json: the manifest of the checkpoint the export was
    restored from, with the global step it was cut at (the exported variables') and the export's
    format ("tfps" or "stock")."""
    saved = manifests.read(checkpoint)
    step = int(tf.train.load_variable(os.path.join(export_path, "variables", "variables"), "global_step"))
    os.makedirs(os.path.join(export_path, "assets.extra"), exist_ok=True)
    with open(os.path.join(export_path, "assets.extra", manifests.EXPORT_MANIFEST), "w") as f:
        json.dump({**saved, "kind": "export", "step": step, "export_format": export_format}, f, sort_keys=True)
