"""`tfps train` in one process: train a JobConfig's model for train.steps, then evaluate it."""
import dataclasses
import tempfile
import time

from tfps.data.sources import make_source
from tfps.models.zoo import model_fn
from tfps.runner.hooks import ProgressHook
from tfps.runner.job import (batch_fields, batch_words, check_eval_set, check_reached, cost_line, final_metrics,
                             nothing_left_if_refused, params_of, pipelined, settings_of, state_step, table_hooks)
from tfps.runner.training import train
from tfps.state.lease import Lease


def run(cfg, printer=print):
    """Trains cfg.train.steps, then evaluates on the eval set. Returns the metrics dict."""
    if cfg.model_dir is None:
        cfg = dataclasses.replace(cfg, model_dir=tempfile.mkdtemp(prefix="tfps_"))
    with Lease(cfg.model_dir, role="tfps train"):   # one writer per model_dir
        return _run(cfg, printer)


def _embedding_words(cfg):
    if cfg.model.hashing_trick:
        return f"stock TensorFlow variables of {cfg.model.hashing_buckets} rows"
    return "one merged table" if cfg.model.merge_tables else "a table each"


def _run(cfg, printer):
    source = make_source(cfg)
    printer(f"model_dir {cfg.model_dir}; training {cfg.model.name} for {cfg.train.steps} steps of "
            f"{batch_words(cfg)} on {source.describe()} (dim {cfg.model.embedding_dim}, "
            f"{_embedding_words(cfg)})", flush=True)
    cost = cost_line(cfg, source)   # MTGR profiles its graph: once
    if cost:
        printer(cost, flush=True)
    check_eval_set(cfg, source)
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
        train(model_fn, params_of(cfg), pipelined(source.train_input_fn(cfg.train.batch_size, start=start_step), cfg),
              settings_of(cfg), max_steps=cfg.train.steps, hooks=[hook] + hooks, saving_listeners=listeners,
              printer=printer)
    train_seconds = time.time() - t0
    check_reached(cfg)
    trained_steps = max(cfg.train.steps - start_step, 0)
    printer(f"trained in {train_seconds:.1f} s; evaluating", flush=True)
    return {
        **final_metrics(cfg, source, printer),
        "examples_per_sec": round(hook.examples_per_sec, 1) if hook.examples_per_sec else None,
        "examples_per_sec_overall": round(trained_steps * hook.examples_per_step / max(train_seconds, 1e-9), 1),
        "final_loss": round(hook.last_loss, 5) if hook.last_loss is not None else None,
        "model": cfg.model.name,
        "steps": cfg.train.steps,
        **batch_fields(cfg),
        "train_seconds": round(train_seconds, 1),
        "steady_window": hook.steady_window,
        "model_dir": cfg.model_dir,
    }
