"""A serving SavedModel of a checkpoint, without tf.estimator: the model_fn's PREDICT graph over
placeholders, its variables and tables restored from the checkpoint (by its tfps.state.StateSaver,
which checks the checkpoint against the model first), written by tf.compat.v1.saved_model.Builder
with the `serving_default` signature (raw tensors) and, for a model of rows with probabilities,
the `classification` and `regression` signatures over serialized tf.train.Examples (TF Serving's
Classify and Regress), and the tfps manifest in assets.extra."""
import json
import os

import tensorflow as tf

from tfps.runner.graph import latest_checkpoint
from tfps.runner.versions import new_version
from tfps.runner.serving_inputs import (example_serving_inputs, sequence_serving_inputs,  # noqa: F401
                                       serving_graph, serving_inputs)
from tfps.state import manifest as manifests


def export_saved_model(model_fn, params, inputs_fn, settings, export_base, checkpoint=None, version=None,
                       format="stock", warmup=()):   # noqa: A002 -- the name `tfps export --format` has
    """Writes export_base/<version>/, a SavedModel of `checkpoint` as a new newest version
    (tfps.runner.versions), and returns its path: what `tfps export` writes, in the same formats
    with the same default. checkpoint: None for model_dir's newest cut (its latest checkpoint and
    the deltas after it); a checkpoint prefix exports that checkpoint -- with the deltas after it
    when it is its model_dir's latest (a restore resumes there the same way), else alone.

    format: "stock" (stock TensorFlow ops only: TensorFlow alone, and TF Serving's own server,
    load it) or "tfps" (tfps's table ops: a process that imported tfps). The version holds
    assets.extra/tfps_manifest.json (the model's manifest and the step it was cut at); a stock
    one also the warm-up requests `warmup` ({input name: numpy rows} each; none by default).
    inputs_fn() makes the placeholders {name: Tensor} the signature takes (serving_inputs,
    sequence_serving_inputs) or a ServingInputs (example_serving_inputs: the Examples signatures
    too)."""
    return export_with_manifest(model_fn, params, inputs_fn, settings, export_base, format, warmup, version,
                                checkpoint=checkpoint)


def write_saved_model(model_fn, params, inputs_fn, settings, path, checkpoint):
    """Writes the tfps-format SavedModel of `checkpoint` at `path` (see export_saved_model): the
    dense state restored, the tables written table by table straight from the checkpoint and
    its deltas (tfps.runner.export_rows), never held in a table of this process."""
    from tfps.embedding.variable import embedding_variables
    from tfps.runner.export_rows import StreamedSaver, TableBundles, write_tables
    from tfps.state.saver import StateSaver
    with tf.Graph().as_default() as graph:
        spec, scaffold, signatures = serving_graph(model_fn, params, inputs_fn, settings)
        builder = tf.compat.v1.saved_model.Builder(path)
        local_init = scaffold.local_init_op if scaffold.local_init_op is not None else \
            tf.compat.v1.train.Scaffold.default_local_init_op()
        saver = scaffold.saver
        streamed = isinstance(saver, StateSaver)
        if streamed:
            dense_saver = tf.compat.v1.train.Saver(var_list=saver.dense_saveables(), sharded=False,
                                                   save_relative_paths=True, name="tfps_export_dense")
            tables = [(ev.name, ev.dim) for ev in embedding_variables(graph)]
            others = saver.other_saveables()   # the model_fn's own: restored from the checkpoint, as a restore does
            other_saver = tf.compat.v1.train.Saver(var_list=others, sharded=False, name="tfps_export_others") \
                if others else None
        with tf.compat.v1.Session(config=settings.config) as session, \
                TableBundles(os.path.dirname(os.path.abspath(path))) as bundles:
            if streamed:
                _, chain = saver.restore_dense(session, checkpoint)
                if other_saver is not None:
                    other_saver.restore(session, checkpoint)
                write_tables(bundles, checkpoint, chain, tables, stock=False, config=settings.config)
                saver = StreamedSaver(saver, dense_saver, bundles)
            else:   # the model_fn's own Saver: the model restored whole
                saver.restore(session, checkpoint)
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.SERVING], signature_def_map=signatures,
                assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
                main_op=local_init, saver=saver, strip_default_attrs=True)
        builder.save()


FORMATS = ("tfps", "stock")


def export_with_manifest(model_fn, params, inputs_fn, settings, export_dir, export_format="stock", warmup=(),
                         version=None, checkpoint=None):
    """A SavedModel of `checkpoint` (default: model_dir's newest cut) as a new newest version of export_dir
    (tfps.runner.versions: `version` None for a timestamp): the tfps format (write_saved_model) or
    stock ops only (tfps.runner.stock_export, with `warmup` requests), given the checkpoint's
    manifest. Exported aside (a directory a server's version poll skips), its manifest written,
    then renamed into export_dir, so a server never sees a version without its manifest, and a
    refused or failed export leaves nothing behind. Returns the version's path."""
    if export_format not in FORMATS:
        raise ValueError(f"export: format must be one of {list(FORMATS)}, got {export_format!r}")
    checkpoint = checkpoint or latest_checkpoint(settings.model_dir)
    if not checkpoint:
        from tfps.state.deltas import latest_cut
        latest_cut(settings.model_dir)   # deltas without a checkpoint: refused as a resume refuses them
        raise ValueError(f"export: no checkpoint in model_dir {settings.model_dir!r}; train first")
    with new_version(export_dir, version) as slot:
        if export_format == "stock":
            from tfps.runner.stock_export import write_stock_saved_model
            write_stock_saved_model(model_fn, params, inputs_fn, settings, slot.path, checkpoint, warmup)
        else:
            write_saved_model(model_fn, params, inputs_fn, settings, slot.path, checkpoint)
        write_export_manifest(slot.path, checkpoint, export_format)
    return os.path.join(export_dir, str(slot.version))


def write_export_manifest(export_path, checkpoint, export_format="tfps"):
    """Writes EXPORT/assets.extra/tfps_manifest.json: the manifest of the checkpoint the export was
    restored from, with the global step it was cut at (the exported variables') and the export's
    format ("tfps" or "stock")."""
    saved = manifests.read(checkpoint)
    step = int(tf.train.load_variable(os.path.join(export_path, "variables", "variables"), "global_step"))
    os.makedirs(os.path.join(export_path, "assets.extra"), exist_ok=True)
    with open(os.path.join(export_path, "assets.extra", manifests.EXPORT_MANIFEST), "w") as f:
        json.dump({**saved, "kind": "export", "step": step, "export_format": export_format}, f, sort_keys=True)
