"""A serving SavedModel of a checkpoint, without tf.estimator: the model_fn's PREDICT graph over
placeholders, its variables and tables restored from the checkpoint (by its tfps.state.StateSaver,
which checks the checkpoint against the model first), written by tf.compat.v1.saved_model.Builder
with the `serving_default` signature, and the tfps manifest in assets.extra."""
import json
import os
import shutil
import tempfile

import tensorflow as tf
from tensorflow.python.saved_model import model_utils

from tfps.data import sequences
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


def sequence_serving_inputs():
    """MTGR's serving inputs: each feature of tfps.data.sequences.SPEC but the label and the user,
    with a batch dimension; lists padded with 0 (what padded_batch does) to one length per request."""
    return {name: tf.compat.v1.placeholder(spec.dtype, [None] + spec.shape.as_list(), name=name)
            for name, spec in sequences.SPEC.items() if name not in ("label", "user")}


def export_saved_model(model_fn, params, inputs_fn, settings, export_base, checkpoint=None):
    """Writes export_base/<timestamp>/ (a SavedModel of `checkpoint`, default model_dir's latest
    with its deltas) and returns its path. inputs_fn() makes the placeholders {name: Tensor} the
    signature takes (serving_inputs, sequence_serving_inputs)."""
    checkpoint = checkpoint or latest_checkpoint(settings.model_dir)
    if not checkpoint:
        raise ValueError(f"export: no checkpoint in model_dir {settings.model_dir!r}; train first")
    with tf.Graph().as_default():
        inputs = inputs_fn()
        spec, scaffold, _, _ = build(model_fn, params, ModeKeys.PREDICT, settings, features=dict(inputs))
        signatures = model_utils.build_all_signature_defs(inputs, spec.export_outputs, serving_only=True)
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


def export_with_manifest(model_fn, params, inputs_fn, settings, export_dir):
    """export_saved_model into export_dir, given the checkpoint's manifest: exported aside (a
    directory a server's version poll skips), its manifest written, then renamed into export_dir,
    so a server never sees a version without its manifest, and a refused or failed export leaves
    nothing behind. Returns the version's path."""
    checkpoint = latest_checkpoint(settings.model_dir)
    if not checkpoint:
        raise ValueError(f"export: no checkpoint in model_dir {settings.model_dir!r}; train first")
    os.makedirs(export_dir, exist_ok=True)
    aside = tempfile.mkdtemp(prefix=".tfps-export-", dir=export_dir)
    try:
        made = export_saved_model(model_fn, params, inputs_fn, settings, aside, checkpoint)
        write_export_manifest(made, checkpoint)
        path = os.path.join(export_dir, os.path.basename(made))
        os.rename(made, path)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return path


def write_export_manifest(export_path, checkpoint):
    """Writes EXPORT/assets.extra/tfps_manifest.json: the manifest of the checkpoint the export was
    restored from, with the global step it was cut at (the exported variables')."""
    saved = manifests.read(checkpoint)
    step = int(tf.train.load_variable(os.path.join(export_path, "variables", "variables"), "global_step"))
    os.makedirs(os.path.join(export_path, "assets.extra"), exist_ok=True)
    with open(os.path.join(export_path, "assets.extra", manifests.EXPORT_MANIFEST), "w") as f:
        json.dump({**saved, "kind": "export", "step": step}, f, sort_keys=True)
