"""One task of a PS/worker cluster described by TF_CONFIG (what `tfps train` runs under
`tfps launch`, a TFJob or any scheduler).

ps:            a tf.distribute.Server over gRPC that holds variables and tables, until killed.
chief, worker: a server of their own, then Estimator.train with variables and table shards
               placed over the PS tasks by size (tfps.cluster.replica_device_setter); async
               training to the shared global step. The chief writes checkpoints, and at the end
               scores the eval sample from the last checkpoint and returns the metrics.
"""
import dataclasses
import os
import time

import numpy as np
import tensorflow as tf

from tfps.cluster.placement import LoadBalancedStrategy, replica_device_setter
from tfps.data.synthetic import SyntheticCriteo, auc
from tfps.estimator.hooks import ProgressHook
from tfps.estimator.runner import eval_set, make_estimator, train_input_fn


def run_task(cfg, cluster_config, printer=print):
    """Runs this task; returns the metrics dict on the chief, None elsewhere (ps never returns)."""
    spec = tf.train.ClusterSpec(cluster_config.cluster)
    job = cluster_config.task_type
    server = tf.distribute.Server(spec, job_name=job, task_index=cluster_config.task_index, protocol="grpc",
                                  start=True)
    if job == "ps":
        printer(f"ps {cluster_config.task_index} serving at {server.target}", flush=True)
        server.join()
        return None
    cluster_config.require_ps()
    if cfg.model.num_shards == 1 and cluster_config.num_ps > 1:
        # One table shard per PS, so that placement can spread the tables.
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_shards=cluster_config.num_ps))
    strategy = LoadBalancedStrategy(cluster_config.num_ps)
    run_config = tf.estimator.RunConfig(
        model_dir=cfg.model_dir, save_checkpoints_steps=cfg.train.save_checkpoints_steps, save_checkpoints_secs=None,
        keep_checkpoint_max=cfg.train.keep_checkpoint_max, log_step_count_steps=None,
        device_fn=replica_device_setter(cluster=spec, worker_device=f"/job:{job}/task:{cluster_config.task_index}",
                                        ps_strategy=strategy))
    est = make_estimator(cfg, run_config)
    gen = SyntheticCriteo(cfg.data)
    hook = ProgressHook(cfg.train.batch_size, cfg.train.log_every_steps, printer)
    # Each worker reads its own stretch of the synthetic stream.
    first_batch = cluster_config.task_index * 10_000_000 + (0 if job in ("chief", "master") else 5_000_000)
    t0 = time.time()
    est.train(train_input_fn(gen, cfg.train.batch_size, first_batch=first_batch), max_steps=cfg.train.steps,
              hooks=[hook])
    seconds = time.time() - t0
    printer("placement:\n" + strategy.table(), flush=True)
    if not cluster_config.is_chief:
        return None
    # Score the last checkpoint in this process: no cluster needed to predict, and a RunConfig
    # made while TF_CONFIG is set would join the cluster.
    os.environ.pop("TF_CONFIG", None)
    local = make_estimator(dataclasses.replace(cfg))
    features, labels, prob = eval_set(gen, cfg.eval.examples, cfg.eval.batch_size)
    preds = local.predict(lambda: tf.data.Dataset.from_tensor_slices(features).batch(cfg.eval.batch_size),
                          yield_single_examples=False)
    scores = np.concatenate([p["probabilities"] for p in preds])
    return {"auc": round(auc(labels, scores), 5), "oracle_auc": round(auc(labels, prob), 5),
            "examples_per_sec": round(hook.examples_per_sec, 1) if hook.examples_per_sec else None,
            # every worker's steps count in the shared global step
            "examples_per_sec_overall": round(cfg.train.steps * cfg.train.batch_size / seconds, 1),
            "steps": cfg.train.steps, "batch_size": cfg.train.batch_size, "train_seconds": round(seconds, 1),
            "model_dir": cfg.model_dir, "task": f"{job}:{cluster_config.task_index}",
            "cluster": {k: len(v) for k, v in cluster_config.cluster.items()}}
