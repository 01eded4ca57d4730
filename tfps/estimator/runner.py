"""Train and evaluate a JobConfig with tf.estimator in one process."""
import contextlib
import dataclasses
import json
import math
import os
import shutil
import tempfile
import time

import tensorflow as tf

from tfps.data import sequences
from tfps.data.sources import make_source, schema_of
from tfps.estimator.hooks import CheckpointSaverHook, EvalProgressHook, EvictionHook, ProgressHook
from tfps.estimator.incremental import IncrementalCheckpoints
from tfps.models.common import BAD_ROWS_VARIABLE
from tfps.models.zoo import model_fn
from tfps.pipeline.dataset import PipelineDataset
from tfps.state import manifest as manifests
from tfps.state.deltas import DeltaRefused, latest_cut
from tfps.state.lease import Lease
from tfps.state.saver import StateSaver


def serving_input_receiver_fn(schema):
    """Raw-tensor serving inputs of a schema: dense float32 [None, num_dense], ids int64
    [None, F], each list feature int64 [None, None] (-1 pads)."""
    def fn():
        inputs = {"ids": tf.compat.v1.placeholder(tf.int64, [None, len(schema.id_features)], name="ids")}
        if schema.num_dense:
            inputs["dense"] = tf.compat.v1.placeholder(tf.float32, [None, schema.num_dense], name="dense")
        for name in schema.list_features:
            inputs[name] = tf.compat.v1.placeholder(tf.int64, [None, None], name=name)
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return fn


def sequence_serving_input_receiver_fn():
    """MTGR's serving inputs: each feature of tfps.data.sequences.SPEC but the label and the user,
    with a batch dimension; lists padded with 0 (what padded_batch does) to one length per request."""
    def fn():
        inputs = {name: tf.compat.v1.placeholder(spec.dtype, [None] + spec.shape.as_list(), name=name)
                  for name, spec in sequences.SPEC.items() if name not in ("label", "user")}
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return fn


def export(cfg, export_dir):
    """Writes a SavedModel of the latest checkpoint in cfg.model_dir; returns its path.

    Its lookups never insert: an id the model never saw reads as its initializer value, and
    serving leaves the tables unchanged."""
    est = make_estimator(cfg)
    if not est.latest_checkpoint():
        raise ValueError(f"export: no checkpoint in model_dir {cfg.model_dir!r}; train first")
    receiver = sequence_serving_input_receiver_fn() if cfg.data.format == "movielens_sequences" else \
        serving_input_receiver_fn(schema_of(cfg))
    # Exported aside (a directory a server's version poll skips), given its manifest, then renamed
    # into export_dir: a server never sees a version without its manifest, and a refused or
    # failed export leaves nothing behind.
    os.makedirs(export_dir, exist_ok=True)
    aside = tempfile.mkdtemp(prefix=".tfps-export-", dir=export_dir)
    try:
        made = est.export_saved_model(aside, receiver).decode()
        write_export_manifest(made, est.latest_checkpoint())
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


def pipelined(input_fn, cfg):
    """input_fn, its dataset wrapped in a tfps.data.PipelineDataset when the config's
    pipeline.enabled is on (at pipeline.depth)."""
    if not cfg.pipeline.enabled:
        return input_fn
    return lambda: PipelineDataset(input_fn(), cfg.pipeline.depth, fuse_dense=cfg.pipeline.fuse_dense,
                                   defer_push=cfg.pipeline.defer_push)


def checkpoint_every(cfg):
    """RunConfig's checkpoint frequency (train.save_checkpoints_secs if set, else _steps) and seed."""
    if cfg.train.save_checkpoints_secs:
        return {"save_checkpoints_secs": cfg.train.save_checkpoints_secs, "save_checkpoints_steps": None,
                "tf_random_seed": cfg.train.seed}
    return {"save_checkpoints_steps": cfg.train.save_checkpoints_steps, "save_checkpoints_secs": None,
            "tf_random_seed": cfg.train.seed}


def make_estimator(cfg, run_config=None):
    params = {"model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train),
              "schema": schema_of(cfg).to_params()}
    run_config = run_config or tf.estimator.RunConfig(
        model_dir=cfg.model_dir, **checkpoint_every(cfg), keep_checkpoint_max=cfg.train.keep_checkpoint_max,
        log_step_count_steps=None)   # TF's thread pools: one thread per core of this machine
    return tf.estimator.Estimator(model_fn=with_checked_saver(model_fn, cfg.train.keep_checkpoint_max),
                                  params=params, config=run_config)


def with_checked_saver(model_fn, keep_checkpoint_max):
    """model_fn whose EstimatorSpec saves and restores through tfps.state.StateSaver (checkpoints
    with the model's manifest; a restore of the newest cut -- the latest checkpoint and its deltas
    -- checked against the model before anything changes, exactly for training, the model's
    variables alike for evaluation and export), unless it brings its own saver, and
    saves through hooks.CheckpointSaverHook (no session.run of its own each step), unless it
    brings its own saver hook. A saver hook passed to train(hooks=...) is not seen here (both
    would save): give yours in the EstimatorSpec instead. tfps's runners pass none."""
    def fn(features, labels, mode, params, config):
        spec = model_fn(features, labels, mode, params)
        if spec.scaffold.saver is None:
            train = mode == tf.estimator.ModeKeys.TRAIN
            saver = StateSaver(sharded=True, max_to_keep=keep_checkpoint_max, defer_build=True, save_relative_paths=True,
                               exact=train, write_manifest=train, in_flight=max(config.num_worker_replicas - 1, 0))
            spec = spec._replace(scaffold=tf.compat.v1.train.Scaffold(saver=saver, copy_from_scaffold=spec.scaffold))
        hooks = list(spec.training_chief_hooks) + list(spec.training_hooks)
        if (mode == tf.estimator.ModeKeys.TRAIN and (config.save_checkpoints_secs or config.save_checkpoints_steps)
                and not any(isinstance(h, tf.compat.v1.train.CheckpointSaverHook) for h in hooks)):
            # Configured as the hook tf.estimator would add (it adds none when the spec has one).
            hook = CheckpointSaverHook(config.model_dir, save_secs=config.save_checkpoints_secs,
                                       save_steps=config.save_checkpoints_steps, scaffold=spec.scaffold,
                                       save_graph_def=config.checkpoint_save_graph_def)
            spec = spec._replace(training_chief_hooks=tuple(spec.training_chief_hooks) + (hook,))
        return spec
    return fn


@contextlib.contextmanager
def nothing_left_if_refused(model_dir):
    """Runs training; when the restore refuses model_dir's state (another model's, a damaged
    delta), removes what the session wrote before the refusal (its event file), so that a refused
    run leaves model_dir as it found it."""
    before = set(os.listdir(model_dir)) if os.path.isdir(model_dir) else set()
    try:
        yield
    except (manifests.StateMismatch, DeltaRefused):
        for name in set(os.listdir(model_dir)) - before if os.path.isdir(model_dir) else ():
            if name.startswith("events.out.tfevents."):
                os.remove(os.path.join(model_dir, name))
        raise


def state_step(model_dir):
    """The global step of the newest cut of model_dir (its latest checkpoint and the deltas after
    it; 0 when it has none): where training resumes, its reader with it."""
    return latest_cut(model_dir)[2]


def check_reached(cfg):
    """ValueError when training stopped short of train.steps: the training input ran out."""
    step = state_step(cfg.model_dir)
    if step < cfg.train.steps:
        raise ValueError(f"training stopped at step {step} of {cfg.train.steps}: the training input ended early "
                         f"(does data.path {cfg.data.path!r} hold any examples?)")


def table_hooks(cfg, printer):
    """(hooks, saving listeners) that keep the tables as the config says: write deltas every
    train.delta_every_secs (the runners' StateSaver restores them), run the eviction rules every
    train.evict_every_steps. In one process the trainer runs them; in a cluster, the chief."""
    hooks, listeners = [], []
    if cfg.train.delta_every_secs:
        inc = IncrementalCheckpoints(cfg.model_dir, every_secs=cfg.train.delta_every_secs, printer=printer)
        hooks.append(inc)
        listeners.append(inc.listener)
    if cfg.train.evict_every_steps:
        hooks.append(EvictionHook(cfg.train.evict_every_steps, printer))
    return hooks, listeners


def cost_line(cfg, source):
    """The model's forward cost per sample, for the models that report one (MTGR), else None."""
    if cfg.model.name != "mtgr":
        return None
    from tfps.models.mtgr import describe_cost
    return describe_cost(cfg, source)


def batch_words(cfg):
    """A training batch, in words: `1024`, or `at most 4096 tokens` (data.max_tokens)."""
    return f"at most {cfg.data.max_tokens} tokens" if cfg.data.max_tokens else f"{cfg.train.batch_size}"


def batch_fields(cfg):
    """The final JSON's batch fields: batch_size (null for token-budget batches, whose sizes
    vary) and max_tokens."""
    return {"batch_size": None if cfg.data.max_tokens else cfg.train.batch_size, "max_tokens": cfg.data.max_tokens}


def json_metric(value, digits=5):
    """A JSON-safe rounded metric: None when undefined (NaN) or absent."""
    return None if value is None or math.isnan(float(value)) else round(float(value), digits)


def final_metrics(cfg, source, printer, estimator=None, name=None):
    """Evaluates the latest checkpoint on the source's eval set: {auc, gauc, logloss, oracle_auc,
    bad_rows, eval_examples}. bad_rows counts the malformed rows skipped in training (saved in the
    checkpoint) and in this evaluation; gauc is None without users, oracle_auc without a planted model."""
    est = estimator or make_estimator(cfg)
    if not est.latest_checkpoint():
        raise ValueError(f"no checkpoint in {est.model_dir!r} to evaluate")
    progress = EvalProgressHook(source.eval_size(), printer=printer)
    result = est.evaluate(source.eval_input_fn(cfg.eval.batch_size), hooks=[progress], name=name)
    if progress.examples == 0:
        raise ValueError(f"the eval set is empty: no examples in {cfg.data.eval_path or cfg.data.path!r}")
    if math.isnan(result["auc"]):
        printer("auc and gauc are undefined: every label of the eval set is the same", flush=True)
    elif "gauc" in result and math.isnan(result["gauc"]):
        printer("gauc is undefined: no user of the eval set has both labels", flush=True)
    ckpt = est.latest_checkpoint()
    names = {n for n, _ in tf.train.list_variables(ckpt)} if ckpt else set()
    trained_bad = int(tf.train.load_variable(ckpt, BAD_ROWS_VARIABLE)) if BAD_ROWS_VARIABLE in names else None
    eval_bad = int(result["bad_rows"]) if "bad_rows" in result else None
    oracle = source.oracle_auc(cfg.eval.batch_size)
    return {"auc": json_metric(result["auc"]), "gauc": json_metric(result.get("gauc")), "logloss": json_metric(result["logloss"]),
            **({"oracle_auc": json_metric(oracle)} if oracle is not None else {}),
            "bad_rows": None if trained_bad is None and eval_bad is None else (trained_bad or 0) + (eval_bad or 0),
            "bad_rows_eval": eval_bad, "eval_examples": progress.examples}


def run(cfg, printer=print):
    """Trains cfg.train.steps, then evaluates on the eval set. Returns the metrics dict."""
    if cfg.model_dir is None:
        cfg = dataclasses.replace(cfg, model_dir=tempfile.mkdtemp(prefix="tfps_"))
    with Lease(cfg.model_dir, role="tfps train"):   # one writer per model_dir
        return _run(cfg, printer)


def _run(cfg, printer):
    source = make_source(cfg)
    est = make_estimator(cfg)
    printer(f"model_dir {cfg.model_dir}; training {cfg.model.name} for {cfg.train.steps} steps of "
            f"{batch_words(cfg)} on {source.describe()} (dim {cfg.model.embedding_dim}, "
            f"{'one merged table' if cfg.model.merge_tables else 'a table each'})", flush=True)
    cost = cost_line(cfg, source)   # MTGR profiles its graph: once
    if cost:
        printer(cost, flush=True)
    start_step = state_step(cfg.model_dir)
    if start_step >= cfg.train.steps:
        printer(f"the checkpoint in model_dir is at step {start_step}, train.steps is {cfg.train.steps}: nothing to "
                f"train (raise train.steps to go on)", flush=True)
    elif start_step:
        printer(f"model_dir holds a state at step {start_step}: resuming from it once it is checked against the "
                f"model", flush=True)
    hook = ProgressHook(cfg.train.batch_size, cfg.train.log_every_steps, printer, max_steps=cfg.train.steps)
    hooks, listeners = table_hooks(cfg, printer)
    t0 = time.time()
    with nothing_left_if_refused(cfg.model_dir):
        est.train(pipelined(source.train_input_fn(cfg.train.batch_size, start=start_step), cfg),
                  max_steps=cfg.train.steps, hooks=[hook] + hooks, saving_listeners=listeners)
    train_seconds = time.time() - t0
    check_reached(cfg)
    trained_steps = max(cfg.train.steps - start_step, 0)
    printer(f"trained in {train_seconds:.1f} s; evaluating", flush=True)
    return {
        **final_metrics(cfg, source, printer, est),
        "examples_per_sec": round(hook.examples_per_sec, 1) if hook.examples_per_sec else None,
        "examples_per_sec_overall": round(trained_steps * hook.examples_per_step / max(train_seconds, 1e-9), 1),
        "final_loss": round(hook.last_loss, 5) if hook.last_loss is not None else None,
        "model": cfg.model.name,
        "steps": cfg.train.steps,
        **batch_fields(cfg),
        "train_seconds": round(train_seconds, 1),
        "model_dir": cfg.model_dir,
    }
