"""Train and evaluate a JobConfig with tf.estimator in one process."""
import dataclasses
import tempfile
import time

import numpy as np
import tensorflow as tf

from tfps.data.synthetic import SyntheticCriteo, auc
from tfps.estimator.hooks import EvictionHook, ProgressHook
from tfps.estimator.incremental import DeltaRestoreHook, IncrementalCheckpoints
from tfps.embedding.checkpoint_tools import Saver
from tfps.metrics import logloss
from tfps.models.deepfm import model_fn

EVAL_INDEX_BASE = 1 << 40  # eval batches never share a seed with training batches


def _features(dense, ids):
    return {"dense": dense, "ids": ids}


def train_input_fn(gen, batch_size, first_batch=0, stride=1):
    """Endless batches first_batch, first_batch + stride, ... of the generator.

    first_batch: an int, or a function called each time the iterator starts (a session
    re-created after a failure re-initializes it) that says where to resume."""
    c = gen.config

    def batches():
        i = first_batch() if callable(first_batch) else first_batch
        while True:
            dense, ids, labels, _ = gen.batch(i, batch_size)
            yield _features(dense, ids), labels
            i += stride

    def input_fn():
        sig = ({"dense": tf.TensorSpec([batch_size, c.num_dense], tf.float32),
                "ids": tf.TensorSpec([batch_size, c.num_categorical], tf.int64)},
               tf.TensorSpec([batch_size], tf.float32))
        return tf.data.Dataset.from_generator(batches, output_signature=sig).prefetch(2)

    return input_fn


def eval_set(gen, examples, batch_size):
    """(features dict of numpy arrays, labels, true probabilities) of the fixed eval sample."""
    parts = [gen.batch(EVAL_INDEX_BASE + i, min(batch_size, examples - i * batch_size))
             for i in range((examples + batch_size - 1) // batch_size)]
    dense, ids, labels, prob = (np.concatenate(p) for p in zip(*parts))
    return _features(dense, ids), labels, prob


def serving_input_receiver_fn(cfg):
    """Raw-tensor serving inputs: dense float32 [None, num_dense], ids int64 [None, num_categorical]."""
    def fn():
        inputs = {"dense": tf.compat.v1.placeholder(tf.float32, [None, cfg.data.num_dense], name="dense"),
                  "ids": tf.compat.v1.placeholder(tf.int64, [None, cfg.data.num_categorical], name="ids")}
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return fn


def export(cfg, export_dir):
    """Writes a SavedModel of the latest checkpoint in cfg.model_dir; returns its path.

    Its lookups never insert: an id the model never saw reads as its initializer value, and
    serving leaves the tables unchanged."""
    est = make_estimator(cfg)
    if not est.latest_checkpoint():
        raise ValueError(f"export: no checkpoint in model_dir {cfg.model_dir!r}; train first")
    return est.export_saved_model(export_dir, serving_input_receiver_fn(cfg)).decode()


def checkpoint_every(cfg):
    """RunConfig's checkpoint frequency: train.save_checkpoints_secs if set, else _steps."""
    if cfg.train.save_checkpoints_secs:
        return {"save_checkpoints_secs": cfg.train.save_checkpoints_secs, "save_checkpoints_steps": None}
    return {"save_checkpoints_steps": cfg.train.save_checkpoints_steps, "save_checkpoints_secs": None}


def make_estimator(cfg, run_config=None):
    params = {"model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train),
              "num_categorical": cfg.data.num_categorical}
    run_config = run_config or tf.estimator.RunConfig(
        model_dir=cfg.model_dir, **checkpoint_every(cfg), keep_checkpoint_max=cfg.train.keep_checkpoint_max,
        log_step_count_steps=None)   # TF's thread pools: one thread per core of this machine
    return tf.estimator.Estimator(model_fn=with_checked_saver(model_fn, cfg.train.keep_checkpoint_max),
                                  params=params, config=run_config)


def with_checked_saver(model_fn, keep_checkpoint_max):
    """model_fn whose EstimatorSpec restores through checkpoint_tools.Saver (a checkpoint that does
    not fit the tables is refused before any table changes), unless it brings its own saver."""
    def fn(features, labels, mode, params):
        spec = model_fn(features, labels, mode, params)
        if spec.scaffold.saver is not None:
            return spec
        saver = Saver(sharded=True, max_to_keep=keep_checkpoint_max, defer_build=True, save_relative_paths=True)
        return spec._replace(scaffold=tf.compat.v1.train.Scaffold(saver=saver, copy_from_scaffold=spec.scaffold))
    return fn


def checkpoint_global_step(path):
    """The global step saved in checkpoint `path` (0 for None); ValueError naming the file when
    it cannot be read (missing or truncated data)."""
    if path is None:
        return 0
    try:
        return int(tf.train.load_variable(path, "global_step"))
    except (RuntimeError, ValueError, IndexError, tf.errors.OpError) as e:
        raise ValueError(f"cannot read checkpoint {path}: {str(e).strip().splitlines()[0]}") from None


def table_hooks(cfg, printer):
    """(hooks, saving listeners) that keep the tables as the config says: restore the deltas after
    a full checkpoint, write deltas every train.delta_every_secs, run the eviction rules every
    train.evict_every_steps. In one process the trainer runs them; in a cluster, the chief."""
    hooks, listeners = [DeltaRestoreHook(cfg.model_dir, printer)], []
    if cfg.train.delta_every_secs:
        inc = IncrementalCheckpoints(cfg.model_dir, every_secs=cfg.train.delta_every_secs, printer=printer)
        hooks.append(inc)
        listeners.append(inc.listener)
    if cfg.train.evict_every_steps:
        hooks.append(EvictionHook(cfg.train.evict_every_steps, printer))
    return hooks, listeners


def run(cfg, printer=print):
    """Trains cfg.train.steps, then scores the eval sample. Returns the metrics dict."""
    if cfg.model_dir is None:
        cfg = dataclasses.replace(cfg, model_dir=tempfile.mkdtemp(prefix="tfps_"))
    gen = SyntheticCriteo(cfg.data)
    est = make_estimator(cfg)
    printer(f"model_dir {cfg.model_dir}; training {cfg.train.steps} steps of {cfg.train.batch_size} "
            f"({cfg.data.num_categorical} features, dim {cfg.model.embedding_dim}, "
            f"{'one merged table' if cfg.model.merge_tables else 'a table each'})", flush=True)
    start_step = checkpoint_global_step(est.latest_checkpoint())
    hook = ProgressHook(cfg.train.batch_size, cfg.train.log_every_steps, printer)
    hooks, listeners = table_hooks(cfg, printer)
    hooks = [hook] + hooks
    t0 = time.time()
    est.train(train_input_fn(gen, cfg.train.batch_size, first_batch=start_step),
              max_steps=cfg.train.steps, hooks=hooks, saving_listeners=listeners)
    train_seconds = time.time() - t0
    trained_steps = cfg.train.steps - start_step
    printer(f"trained in {train_seconds:.1f} s; evaluating on {cfg.eval.examples} examples", flush=True)
    features, labels, prob = eval_set(gen, cfg.eval.examples, cfg.eval.batch_size)
    preds = est.predict(lambda: tf.data.Dataset.from_tensor_slices(features).batch(cfg.eval.batch_size),
                        yield_single_examples=False)
    scores = np.concatenate([p["probabilities"] for p in preds])
    return {
        "auc": round(auc(labels, scores), 5),
        "logloss": round(logloss(labels, scores), 5),
        "gauc": None,   # the synthetic data has no users
        "oracle_auc": round(auc(labels, prob), 5),
        "examples_per_sec": round(hook.examples_per_sec, 1) if hook.examples_per_sec else None,
        "examples_per_sec_overall": round(trained_steps * cfg.train.batch_size / train_seconds, 1),
        "final_loss": round(hook.last_loss, 5) if hook.last_loss is not None else None,
        "steps": cfg.train.steps,
        "batch_size": cfg.train.batch_size,
        "train_seconds": round(train_seconds, 1),
        "model_dir": cfg.model_dir,
    }
