"""A JobConfig (tfps.config) on the runner: its settings, model_fn and params, inputs, table
hooks, the final metrics and the export -- what `tfps train`, `tfps launch` and `tfps export`
share."""
import contextlib
import dataclasses
import math
import os
import sys

import tensorflow as tf

from tfps.data.sources import example_specs, make_source, schema_of
from tfps.models.common import BAD_ROWS_VARIABLE
from tfps.models.zoo import model_fn
from tfps.pipeline.dataset import PipelineDataset
from tfps.runner.evaluation import evaluate
from tfps.runner.export import example_serving_inputs, export_with_manifest, sequence_serving_inputs
from tfps.runner.graph import RunSettings, latest_checkpoint
from tfps.runner.hooks import EvalProgressHook, EvictionHook
from tfps.runner import prediction
from tfps.runner.incremental import IncrementalCheckpoints
from tfps.state import disk, manifest as manifests
from tfps.state.deltas import DeltaRefused, latest_cut


def params_of(cfg):
    """The params every tfps model_fn takes: the `model` and `train` sections and the schema."""
    return {"model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train),
            "schema": schema_of(cfg).to_params()}


def checkpoint_every(cfg):
    """The checkpoint frequency (train.save_checkpoints_secs if set, else _steps) and the seed."""
    if cfg.train.save_checkpoints_secs:
        return {"save_checkpoints_secs": cfg.train.save_checkpoints_secs, "save_checkpoints_steps": None,
                "seed": cfg.train.seed}
    return {"save_checkpoints_steps": cfg.train.save_checkpoints_steps, "save_checkpoints_secs": None,
            "seed": cfg.train.seed}


def settings_of(cfg, **cluster):
    """The RunSettings of a JobConfig; `cluster`: a task's master, is_chief, device_fn, ..."""
    return RunSettings(model_dir=cfg.model_dir, keep_checkpoint_max=cfg.train.keep_checkpoint_max,
                       **checkpoint_every(cfg), **cluster)


def pipelined(input_fn, cfg):
    """input_fn, its dataset wrapped in a tfps.data.PipelineDataset when the config's
    pipeline.enabled is on (at pipeline.depth)."""
    if not cfg.pipeline.enabled:
        return input_fn
    return lambda: PipelineDataset(input_fn(), cfg.pipeline.depth, fuse_dense=cfg.pipeline.fuse_dense,
                                   defer_push=cfg.pipeline.defer_push)


@contextlib.contextmanager
def nothing_left_if_refused(model_dir):
    """Runs training; when the restore refuses model_dir's state (another model's, a damaged
    delta or checkpoint), removes what the session wrote before the refusal (its event file) and
    puts back the `checkpoint` index as it was (the trainer rewrites it when it was missing or
    stale: disk.rewrite_index), so that a refused run leaves model_dir as it found it."""
    before = set(os.listdir(model_dir)) if os.path.isdir(model_dir) else set()
    index = os.path.join(model_dir, disk.INDEX)
    try:
        with open(index, "rb") as f:
            index_bytes = f.read()
    except OSError:
        index_bytes = None
    try:
        yield
    except (manifests.StateMismatch, DeltaRefused, disk.CheckpointUnreadable):
        for name in set(os.listdir(model_dir)) - before if os.path.isdir(model_dir) else ():
            if name.startswith("events.out.tfevents."):
                os.remove(os.path.join(model_dir, name))
        if index_bytes is None:
            if os.path.exists(index):
                os.remove(index)
        else:
            with open(index, "wb") as f:
                f.write(index_bytes)
        raise


def check_eval_set(cfg, source):
    """ValueError before training when the eval set of cfg's source has no good row, instead of
    after training and a checkpoint: tfps.data.file_source.EvalSetEmpty naming the eval data and
    why, or the reader's error naming the file and the bad row it stopped at. The source reads no
    more than it must (source.check_eval_rows: eval files up to their first good row; a MovieLens
    split, cut by time per user, is counted whole once a run)."""
    source.check_eval_rows()


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
    train.delta_every_secs (the runner's StateSaver restores them), run the eviction rules every
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


def runner_evaluation(cfg, fn=model_fn):
    """evaluate(input_fn, hooks, name) -> (result, checkpoint) of the model `fn` (tfps's model
    zoo by default) on cfg.model_dir's latest checkpoint, in this process (outside any cluster)."""
    def run(input_fn, hooks, name):
        ckpt = latest_checkpoint(cfg.model_dir)
        if not ckpt:
            raise ValueError(f"no checkpoint in {cfg.model_dir!r} to evaluate")
        return evaluate(fn, params_of(cfg), input_fn, settings_of(cfg), checkpoint=ckpt, hooks=hooks,
                        name=name), ckpt
    return run


def final_metrics(cfg, source, printer, evaluation=None, name=None):
    """Evaluates the latest checkpoint on the source's eval set: {auc, gauc, logloss, oracle_auc,
    bad_rows, eval_examples}. bad_rows counts the malformed rows skipped in training (saved in the
    checkpoint) and in this evaluation; gauc is None without users, oracle_auc without a planted
    model. evaluation: how to evaluate (runner_evaluation(cfg) by default)."""
    progress = EvalProgressHook(source.eval_size(), printer=printer)
    result, ckpt = (evaluation or runner_evaluation(cfg))(source.eval_input_fn(cfg.eval.batch_size), [progress], name)
    if progress.examples == 0:
        skipped = int(result.get("bad_rows", 0) or 0)
        raise ValueError(f"the eval set is empty: no examples in {cfg.data.eval_path or cfg.data.path!r}"
                         + (f" ({skipped} malformed rows read and skipped: data.skip_bad_rows)" if skipped else ""))
    if math.isnan(result["auc"]):
        printer("auc and gauc are undefined: every label of the eval set is the same", flush=True)
    elif "gauc" in result and math.isnan(result["gauc"]):
        printer("gauc is undefined: no user of the eval set has both labels", flush=True)
    names = {n for n, _ in tf.train.list_variables(ckpt)} if ckpt else set()
    trained_bad = int(tf.train.load_variable(ckpt, BAD_ROWS_VARIABLE)) if BAD_ROWS_VARIABLE in names else None
    eval_bad = int(result["bad_rows"]) if "bad_rows" in result else None
    oracle = source.oracle_auc(cfg.eval.batch_size)
    return {"auc": json_metric(result["auc"]), "gauc": json_metric(result.get("gauc")),
            "logloss": json_metric(result["logloss"]),
            **({"oracle_auc": json_metric(oracle)} if oracle is not None else {}),
            "bad_rows": None if trained_bad is None and eval_bad is None else (trained_bad or 0) + (eval_bad or 0),
            "bad_rows_eval": eval_bad, "eval_examples": progress.examples}


def export(cfg, export_dir, export_format=None, version=None, printer=print):
    """Writes a SavedModel of the latest checkpoint in cfg.model_dir under export_dir; returns its
    path. Its lookups never insert: an id the model never saw reads as its initializer value, and
    serving leaves the tables unchanged. Signatures: `serving_default` (raw tensors) and, but for
    MTGR's samples, `classification` and `regression` over tf.train.Examples of the data's feature
    specs (example_specs: what tfps convert writes). export_format: "tfps" or "stock" (None:
    cfg.export.format); a stock export also holds warm-up requests of the data's first eval rows.
    version: the export's version number (tfps.runner.versions; None: a timestamp)."""
    export_format = export_format or cfg.export.format
    note = disk.unfinished_note(cfg.model_dir)
    if note:
        printer(note, file=sys.stderr, flush=True)
    if cfg.data.format == "movielens_sequences":
        inputs = sequence_serving_inputs
    else:
        schema, specs = schema_of(cfg), example_specs(cfg)
        inputs = lambda: example_serving_inputs(schema, specs)   # noqa: E731
    warmup = warmup_requests(cfg) if export_format == "stock" else ()
    return export_with_manifest(model_fn, params_of(cfg), inputs, settings_of(cfg), export_dir, export_format, warmup,
                                version=version)


def warmup_requests(cfg, sizes=(1, 4)):
    """Requests of the `serving_default` signature, one of each size, made of the first rows of the
    data's eval input ({input name: numpy rows} each; the label and MTGR's user left out): the first
    batch of the eval input that evaluation reads (cfg.eval.batch_size rows, or more if a request
    is larger). A batch of the requests' own size would make the synthetic source generate its
    whole eval set in batches that small (seconds of CPU for 4 rows)."""
    try:
        with tf.Graph().as_default():
            batch = tf.compat.v1.data.make_one_shot_iterator(
                make_source(cfg).eval_input_fn(max(max(sizes), cfg.eval.batch_size))()).get_next()
            with tf.compat.v1.Session() as session:
                features = session.run(batch[0] if isinstance(batch, tuple) else batch)
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise ValueError(f"export --format stock writes warm-up requests of the data's first eval rows, and "
                         f"cannot read them ({str(e).strip().splitlines()[0]}): make the config's eval data "
                         f"readable here, or export with --format tfps") from None
    # (not the serving inputs: the label, MTGR's user, and per-batch scalars such as bad_rows)
    features = {k: v for k, v in features.items() if k not in ("label", "user") and getattr(v, "ndim", 0) > 0}
    return [{k: v[:n] for k, v in features.items()} for n in sizes]


def predict(cfg, input_fn):
    """tfps.runner.prediction.predict of cfg's model from the latest checkpoint in cfg.model_dir:
    a dict of arrays per batch of input_fn."""
    return prediction.predict(model_fn, params_of(cfg), input_fn, settings_of(cfg))
