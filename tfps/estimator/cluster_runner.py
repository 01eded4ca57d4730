"""One task of a PS/worker cluster described by TF_CONFIG (what `tfps train` runs under
`tfps launch`, a TFJob or any scheduler), through tf.estimator.train_and_evaluate.

ps:            a tf.distribute.Server over gRPC that holds variables and table shards, until killed.
chief, worker: a server of their own, then asynchronous training to the shared global step, with
               variables and table shards placed over the PS tasks by size
               (tfps.cluster.replica_device_setter). The chief writes checkpoints and, at the end,
               scores the eval sample from the last checkpoint.
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
import os
import socket
import time

import tensorflow as tf

from tfps.cluster.health import watch_peers
from tfps.cluster.placement import LoadBalancedStrategy, replica_device_setter
from tfps.cluster.tf_config import ClusterConfigError, check_protocol
from tfps.data.sources import make_source
from tfps.estimator.hooks import EvalProgressHook, ProgressHook, StepStatsHook
from tfps.estimator.runner import (batch_fields, check_reached, checkpoint_every, final_metrics, json_metric,
                                   cost_line, make_estimator, nothing_left_if_refused, pipelined, state_step,
                                   table_hooks)
from tfps.state.lease import Lease

FIRST_CHECKPOINT_POLL_SECS = 0.5


def _wait_for_first_checkpoint(model_dir, printer, poll_secs=FIRST_CHECKPOINT_POLL_SECS):
    """Blocks a non-chief trainer until the chief has written its first checkpoint.

    The chief writes one right after it initializes the model. A worker whose session found the
    model not ready would sleep SessionManager's fixed 30 s (MonitoredTrainingSession has no
    setting for it) before it looks again; waiting here lets it start as soon as the chief is
    ready. After a PS restart that 30 s poll still applies: workers rejoin up to 30 s after the
    chief has restored."""
    t0 = last = time.time()
    while not tf.train.latest_checkpoint(model_dir):
        if time.time() - last >= 30:
            last = time.time()
            printer(f"waiting for the chief's first checkpoint in {model_dir} ({last - t0:.0f} s so far)", flush=True)
        time.sleep(poll_secs)


class _CheckpointEvents(logging.Filter):
    """Lets TF's own checkpoint lines through a logger otherwise kept at ERROR: which checkpoint
    a (re-created) session restored and when the chief saves."""

    def filter(self, record):
        return record.levelno >= logging.ERROR or record.getMessage().startswith(
            ("Restoring parameters from", "Saving checkpoints for"))


def _check_address_free(cluster_config):
    """A clear error when this task's host:port is taken, before TF's gRPC server tries it."""
    address = cluster_config.cluster[cluster_config.task_type][cluster_config.task_index]
    host, port = address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as e:
            raise ClusterConfigError(f"TF_CONFIG {cluster_config.task_type}[{cluster_config.task_index}]: cannot "
                                     f"listen on {address}: {e.strerror}") from None


class _PrintEvalMetrics(tf.estimator.Exporter):
    """An 'exporter' that exports nothing: it prints each evaluation's metrics as a JSON line."""

    def __init__(self, printer):
        self._print = printer
        self.last = None

    @property
    def name(self):
        return "print_metrics"

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        self.last = {"task": "evaluator", "global_step": int(eval_result["global_step"]),
                     **{k: json_metric(eval_result.get(k)) for k in ("auc", "gauc", "logloss", "loss")}}
        self._print(json.dumps(self.last), flush=True)
        return None


class _PrintPlacement(tf.compat.v1.train.SessionRunHook):
    """Prints the placement table once the graph is built, before training starts."""

    def __init__(self, strategy, printer):
        self._strategy, self._print = strategy, printer

    def begin(self):
        self._print("placement of variables and table shards over the PS tasks:\n" + self._strategy.table(),
                    flush=True)


class _RecoveryLog(tf.compat.v1.train.SessionRunHook):
    """Says so when MonitoredTrainingSession re-creates the session after a task failed (the
    chief's session creator has just restored the latest checkpoint and logged which)."""

    def __init__(self, printer):
        self._print = printer
        self.sessions = 0

    def begin(self):
        self._gs = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.sessions += 1
        if self.sessions == 1:
            return
        self._print(f"session re-created after a task failure ({self.sessions - 1} so far); the model is "
                    f"ready at global step {int(session.run(self._gs))}", flush=True)


PEER_TIMEOUT_EXIT = 75   # EX_TEMPFAIL: a PS did not answer for cluster.peer_timeout_secs


def _watch_ps(cfg, cluster_config, printer):
    """A trainer pings its PS tasks every few seconds: says `waiting on ps1 for N s` while one is
    silent (gone, unreachable or frozen), and exits with PEER_TIMEOUT_EXIT once one has been
    silent for cluster.peer_timeout_secs -- instead of waiting forever. Returns the stop event."""
    peers = {f"ps{i}": address for i, address in enumerate(cluster_config.cluster["ps"])}
    me = f"{cluster_config.task_type}{cluster_config.task_index}"

    def silent(name, address, seconds):
        printer(f"{me}: waiting on {name} ({address}) for {seconds:.0f} s", flush=True)

    def deadline(name, address, seconds):
        printer(f"{me}: {name} ({address}) has not answered for {seconds:.0f} s (cluster.peer_timeout_secs = "
                f"{cfg.cluster.peer_timeout_secs:g}); giving up so that the task can be restarted", flush=True)
        os._exit(PEER_TIMEOUT_EXIT)
    return watch_peers(peers, cfg.cluster.peer_timeout_secs, silent, deadline,
                       every_secs=min(5.0, cfg.cluster.peer_timeout_secs / 4))


def _run_config(cfg, cluster_config, spec, strategy):
    common = dict(model_dir=cfg.model_dir, **checkpoint_every(cfg), keep_checkpoint_max=cfg.train.keep_checkpoint_max,
                  log_step_count_steps=None, protocol=cfg.cluster.protocol,
                  experimental_max_worker_delay_secs=0)   # workers wait for readiness instead
    if cluster_config.task_type in ("ps", "evaluator"):
        return _without_spinning(tf.estimator.RunConfig(**common))
    device_fn = replica_device_setter(cluster=spec, ps_strategy=strategy,
                                      worker_device=f"/job:{cluster_config.task_type}/task:{cluster_config.task_index}")
    return _without_spinning(tf.estimator.RunConfig(device_fn=device_fn, **common))


def _without_spinning(run_config):
    """run_config whose TF thread pools sleep when idle instead of spinning first: the tasks of a
    cluster share the machine's cores, and a task spinning while it waits on another takes the
    cores that task needs (its server and sessions use this config)."""
    config = tf.compat.v1.ConfigProto()
    if run_config.session_config is not None:
        config.CopyFrom(run_config.session_config)
    config.experimental.disable_thread_spinning = True
    return run_config.replace(session_config=config)


def run_task(cfg, cluster_config, printer=print):
    """Runs this task through tf.estimator.train_and_evaluate.

    Returns a metrics dict: the chief's final metrics (AUC of the last checkpoint, rates, traffic
    per step), a worker's own rate, the evaluator's last evaluation. A PS never returns."""
    job, index = cluster_config.task_type, cluster_config.task_index
    cluster_config.require_ps()
    # One writer per model_dir: the chief (its lease is released when the process ends).
    lease = Lease(cfg.model_dir, role=f"the chief of a cluster ({job} {index})") if cluster_config.is_chief else None
    check_protocol(cfg.cluster.protocol)
    if job != "evaluator":
        _check_address_free(cluster_config)
    if cfg.model.num_shards == 1 and cluster_config.num_ps > 1:
        # One table shard per PS, so that placement can spread the tables.
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_shards=cluster_config.num_ps))
    if not any(isinstance(f, _CheckpointEvents) for f in tf.get_logger().filters):
        tf.get_logger().setLevel(logging.INFO)
        tf.get_logger().addFilter(_CheckpointEvents())
    spec = tf.train.ClusterSpec(cluster_config.cluster)
    strategy = LoadBalancedStrategy(cluster_config.num_ps)
    est = make_estimator(cfg, _run_config(cfg, cluster_config, spec, strategy))
    source = make_source(cfg) if job != "ps" else None   # a PS reads no data
    # Trainers read interleaved batches: task k of W reads k, k + W, k + 2W, ... from where the
    # latest checkpoint left off, so trainers of equal speed together read the stream one process
    # would (a trainer that falls behind leaves part of its share unread when the global step ends). The
    # iterator restarts whenever a session is re-created (a PS restarted): it resumes from the
    # checkpoint just restored instead of replaying the stream from its start.
    trainers = [t for t in ("chief", "master", "worker") for _ in cluster_config.cluster.get(t, [])]
    rank = index + (0 if job in ("chief", "master") else len(cluster_config.cluster.get("chief", [])))

    def resume_batch():   # the newest cut's step, read when the session's iterator starts
        step = state_step(cfg.model_dir)
        return step - step % len(trainers)

    start = state_step(cfg.model_dir)
    progress = ProgressHook(cfg.train.batch_size, cfg.train.log_every_steps, printer, task_rate=True,
                            max_steps=cfg.train.steps)
    traffic = StepStatsHook(after_local_steps=min(50, cfg.train.steps // 4), num_steps=5, printer=printer)
    exporter = _PrintEvalMetrics(printer)
    recovery = _RecoveryLog(printer)
    hooks = [_PrintPlacement(strategy, printer), recovery, progress, traffic]
    # Delta checkpoints and eviction: the chief runs them, like the full checkpoints.
    tables, listeners = table_hooks(cfg, printer) if cluster_config.is_chief else ([], [])
    if source is None:   # a PS never calls the input functions
        train_spec = tf.estimator.TrainSpec(lambda: None, max_steps=cfg.train.steps)
        eval_spec = tf.estimator.EvalSpec(lambda: None)
    else:
        input_fn = pipelined(source.train_input_fn(cfg.train.batch_size, start=resume_batch, shard_index=rank,
                                                  num_shards=len(trainers)), cfg)
        train_spec = tf.estimator.TrainSpec(input_fn, max_steps=cfg.train.steps, hooks=hooks + tables,
                                            saving_listeners=listeners)
        eval_hooks = [EvalProgressHook(None, printer=printer)] if job == "evaluator" else []
        eval_spec = tf.estimator.EvalSpec(source.eval_input_fn(cfg.eval.batch_size), steps=None, exporters=[exporter],
                                          start_delay_secs=0, throttle_secs=cfg.eval.throttle_secs, hooks=eval_hooks)
    if job == "ps":
        printer(f"ps {index} serving at {cluster_config.cluster['ps'][index]}", flush=True)
    elif job != "evaluator":
        printer(f"{job} {index}: training to global step {cfg.train.steps} (model_dir's newest state: step {start}), "
                f"batches {rank}, {rank + len(trainers)}, ... of the stream, each from the step the session starts at",
                flush=True)
        cost = cost_line(cfg, source) if cluster_config.is_chief else None   # MTGR profiles its graph: once
        if cost:
            printer(cost, flush=True)
    if job == "worker" and not cluster_config.is_chief:
        _wait_for_first_checkpoint(cfg.model_dir, printer)
    stop_watch = _watch_ps(cfg, cluster_config, printer) if job in ("chief", "master", "worker") else None
    t0 = time.time()
    with nothing_left_if_refused(cfg.model_dir) if cluster_config.is_chief else contextlib.nullcontext():
        tf.estimator.train_and_evaluate(est, train_spec, eval_spec)
    seconds = time.time() - t0
    if stop_watch is not None:
        stop_watch.set()
    if job == "evaluator":
        return exporter.last or {"task": "evaluator", "global_step": None}
    task = {"task": f"{job}:{index}", "local_steps": progress.local_steps, "sessions": recovery.sessions,
            "task_examples_per_sec": _round(progress.task_examples_per_sec),
            "examples_per_sec": _round(progress.examples_per_sec), "traffic_per_step": traffic.stats}
    if not cluster_config.is_chief:
        return task
    check_reached(cfg)
    lease.release()   # the final evaluation writes nothing
    # Evaluate the last checkpoint in this process: no cluster needed.
    with _outside_the_cluster():
        local = make_estimator(cfg)
    return {**final_metrics(cfg, source, printer, estimator=local, name="final"), **task, "model": cfg.model.name,
            # every worker's steps count in the shared global step
            "examples_per_sec_overall": round((cfg.train.steps - start) * progress.examples_per_step / seconds, 1),
            "steps": cfg.train.steps, **batch_fields(cfg), "train_seconds": round(seconds, 1),
            "model_dir": cfg.model_dir, "cluster": {k: len(v) for k, v in cluster_config.cluster.items()}}


@contextlib.contextmanager
def _outside_the_cluster():
    """TF_CONFIG hidden while the block makes an Estimator: its RunConfig reads TF_CONFIG from the
    environment when it is made (it has no argument to ignore it) and would join the cluster."""
    saved = os.environ.pop("TF_CONFIG", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["TF_CONFIG"] = saved


def _round(x):
    return round(x, 1) if x else None
