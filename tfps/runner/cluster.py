"""One task of a PS/worker cluster described by TF_CONFIG (what `tfps train` runs under
`tfps launch`, a TFJob or any scheduler), on tfps's runner.

ps:            a tf.distribute.Server over gRPC that holds variables and table shards, until killed.
chief, worker: a server of their own, then asynchronous training to the shared global step, with
               variables and table shards placed over the PS tasks by size
               (tfps.cluster.replica_device_setter). The chief writes checkpoints and, at the end,
               scores the eval sample from the last checkpoint, in this process.
evaluator:     outside the cluster; evaluates each new checkpoint until the last one.

If a PS task dies and comes back (tfps launch restarts it), the sessions of the chief and the
workers fail with Aborted/Unavailable and MonitoredTrainingSession re-creates them: the chief
restores the latest checkpoint (tables included) and the workers wait until the model is ready
again, tables included (they register as resources with an initialized flag), checking every
30 s as TF's SessionManager does.
"""
import contextlib
import dataclasses
import json
import logging
import time

import tensorflow as tf

from tfps.cluster.placement import LoadBalancedStrategy, replica_device_setter
from tfps.cluster.tf_config import check_protocol
from tfps.data.sources import make_source
from tfps.models.zoo import model_fn
from tfps.runner.evaluation import evaluate_new_checkpoints
from tfps.runner.graph import default_session_config
from tfps.runner.hooks import EvalProgressHook, ProgressHook, StepStatsHook
from tfps.runner.job import (batch_fields, check_eval_set, check_reached, cost_line, final_metrics, json_metric,
                             nothing_left_if_refused, params_of, pipelined, settings_of, state_step, table_hooks)
from tfps.runner.task import (CheckpointEvents, PrintPlacement, RecoveryLog, check_address_free, start_server,
                              watch_ps)
from tfps.runner.training import train
from tfps.state.lease import Lease

TRAINERS = ("chief", "master", "worker")


def _session_config(job, index):
    """A trainer talks to the PS tasks and itself only (device filters); no task's thread pools
    spin while idle: the tasks of a cluster share the machine's cores, and a task spinning while
    it waits on another takes the cores that task needs."""
    filters = {"chief": ["/job:ps", "/job:chief"], "master": ["/job:ps", "/job:master"],
               "worker": ["/job:ps", f"/job:worker/task:{index}"]}.get(job)
    config = default_session_config(filters) if filters else tf.compat.v1.ConfigProto()
    config.experimental.disable_thread_spinning = True
    return config


def run_task(cfg, cluster_config, printer=print):
    """Runs this task of the cluster.

    Returns a metrics dict: the chief's final metrics (AUC of the last checkpoint, rates, traffic
    per step), a worker's own rate, the evaluator's last evaluation. A PS never returns."""
    job, index = cluster_config.task_type, cluster_config.task_index
    cluster_config.require_ps()
    # One writer per model_dir: the chief (its lease is released when the process ends).
    lease = Lease(cfg.model_dir, role=f"the chief of a cluster ({job} {index})") if cluster_config.is_chief else None
    check_protocol(cfg.cluster.protocol)
    if job != "evaluator":
        check_address_free(cluster_config)
    if cfg.model.num_shards == 1 and cluster_config.num_ps > 1:
        # One table shard per PS, so that placement can spread the tables.
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_shards=cluster_config.num_ps))
    if not any(isinstance(f, CheckpointEvents) for f in tf.get_logger().filters):
        tf.get_logger().setLevel(logging.INFO)
        tf.get_logger().addFilter(CheckpointEvents())
    if job == "ps":
        server = start_server(cluster_config, cfg.cluster.protocol)
        printer(f"ps {index} serving at {cluster_config.cluster['ps'][index]}", flush=True)
        server.join()   # never returns
    source = make_source(cfg)
    if job == "evaluator":
        return _evaluate(cfg, source, printer)
    return _train(cfg, cluster_config, source, lease, printer)


def _evaluate(cfg, source, printer):
    """The evaluator: each new checkpoint's metrics as a JSON line; the last evaluation's."""
    last = {}

    def on_result(result):
        last.update({"task": "evaluator", "global_step": int(result["global_step"]),
                     **{k: json_metric(result.get(k)) for k in ("auc", "gauc", "logloss", "loss")}})
        printer(json.dumps(last), flush=True)
    evaluate_new_checkpoints(model_fn, params_of(cfg), source.eval_input_fn(cfg.eval.batch_size),
                             settings_of(cfg, session_config=_session_config("evaluator", 0)), cfg.train.steps,
                             on_result, hooks=[EvalProgressHook(None, printer=printer)],
                             throttle_secs=cfg.eval.throttle_secs, printer=printer)
    return last or {"task": "evaluator", "global_step": None}


def _train(cfg, cluster_config, source, lease, printer):
    job, index = cluster_config.task_type, cluster_config.task_index
    spec = tf.train.ClusterSpec(cluster_config.cluster)
    strategy = LoadBalancedStrategy(cluster_config.num_ps)
    # Trainers read interleaved batches: task k of W reads k, k + W, k + 2W, ... from where the
    # latest checkpoint left off, so trainers of equal speed together read the stream one process
    # would (a trainer that falls behind leaves part of its share unread when the global step ends). The
    # iterator restarts whenever a session is re-created (a PS restarted): it resumes from the
    # checkpoint just restored instead of replaying the stream from its start.
    trainers = [t for t in TRAINERS for _ in cluster_config.cluster.get(t, [])]
    rank = index + (0 if job in ("chief", "master") else
                    len(cluster_config.cluster.get("chief", [])) + len(cluster_config.cluster.get("master", [])))

    def resume_batch():   # the newest cut's step, read when the session's iterator starts
        step = state_step(cfg.model_dir)
        return step - step % len(trainers)

    if cluster_config.is_chief:
        check_eval_set(cfg, source)
    start = state_step(cfg.model_dir)
    progress = ProgressHook(cfg.train.batch_size, cfg.train.log_every_steps, printer, task_rate=True,
                            max_steps=cfg.train.steps)
    # Traced once every trainer is past its start (a trainer's share of a short job can be a
    # fraction of it: the workers now train from the chief's start).
    traffic = StepStatsHook(after_local_steps=min(50, cfg.train.steps // (4 * len(trainers))), num_steps=5,
                            printer=printer)
    recovery = RecoveryLog(printer)
    # Delta checkpoints and eviction: the chief runs them, like the full checkpoints.
    tables, listeners = table_hooks(cfg, printer) if cluster_config.is_chief else ([], [])
    # The placement table (every trainer's is the same): in the chief's log, once.
    hooks = ([PrintPlacement(strategy, printer)] if cluster_config.is_chief else []) + [recovery, progress, traffic] + tables
    input_fn = pipelined(source.train_input_fn(cfg.train.batch_size, start=resume_batch, shard_index=rank,
                                              num_shards=len(trainers)), cfg)
    config = _session_config(job, index)
    server = start_server(cluster_config, cfg.cluster.protocol)
    settings = settings_of(cfg, master=server.target, is_chief=cluster_config.is_chief,
                           num_worker_replicas=len(trainers), trainer_rank=rank, session_config=config,
                           device_fn=replica_device_setter(cluster=spec, ps_strategy=strategy,
                                                           worker_device=f"/job:{job}/task:{index}"))
    printer(f"{job} {index}: training to global step {cfg.train.steps} (model_dir's newest state: step {start}), "
            f"batches {rank}, {rank + len(trainers)}, ... of the stream, each from the step the session starts at",
            flush=True)
    cost = cost_line(cfg, source) if cluster_config.is_chief else None   # MTGR profiles its graph: once
    if cost:
        printer(cost, flush=True)
    stop_watch = watch_ps(cfg, cluster_config, printer)
    t0 = time.time()
    with nothing_left_if_refused(cfg.model_dir) if cluster_config.is_chief else contextlib.nullcontext():
        train(model_fn, params_of(cfg), input_fn, settings, cfg.train.steps, hooks=hooks, saving_listeners=listeners,
              printer=printer)
    seconds = time.time() - t0
    stop_watch.set()
    task = {"task": f"{job}:{index}", "local_steps": progress.local_steps, "sessions": recovery.sessions,
            "task_examples_per_sec": _round(progress.task_examples_per_sec),
            "examples_per_sec": _round(progress.examples_per_sec), "traffic_per_step": traffic.stats,
            "steady_window": progress.steady_window}
    if not cluster_config.is_chief:
        return task
    check_reached(cfg)
    lease.release()   # the final evaluation writes nothing
    # Evaluate the last checkpoint in this process: no cluster needed.
    return {**final_metrics(cfg, source, printer, name="final"), **task, "model": cfg.model.name,
            # every worker's steps count in the shared global step
            "examples_per_sec_overall": round((cfg.train.steps - start) * progress.examples_per_step / seconds, 1),
            "steps": cfg.train.steps, **batch_fields(cfg), "train_seconds": round(seconds, 1),
            "model_dir": cfg.model_dir, "cluster": {k: len(v) for k, v in cluster_config.cluster.items()}}


def _round(x):
    return round(x, 1) if x else None
