"""Evaluating a model_fn on a checkpoint (MonitoredSession over the eval input until it ends),
and the evaluator's loop over a model_dir's new checkpoints.

evaluate() returns {metric: value, "loss": mean loss, "global_step": step of the restored cut}
and, like tf.estimator, writes them as summaries to model_dir/eval (model_dir/eval_<name>)."""
import os
import time

import numpy as np
import tensorflow as tf

from tfps.models.spec import ModeKeys
from tfps.runner.graph import build, latest_checkpoint
from tfps.runner.hooks import use_spec

LOSS_KEY = "loss"
GLOBAL_STEP_KEY = "global_step"


def evaluate(model_fn, params, input_fn, settings, checkpoint=None, hooks=(), name=None):
    """Restores `checkpoint` (default: model_dir's latest, with the deltas after it) and runs the
    spec's metric updates over the whole eval input. ValueError when there is no checkpoint."""
    checkpoint = checkpoint_to_restore(settings, checkpoint, "evaluate")
    with tf.Graph().as_default():
        eval_step()
        spec, scaffold, input_hooks, gs = build(model_fn, params, ModeKeys.EVAL, settings, input_fn=input_fn)
        use_spec(hooks, spec)
        metrics = dict(spec.eval_metric_ops or {})
        for key in (LOSS_KEY, GLOBAL_STEP_KEY):
            if key in metrics:
                raise ValueError(f"model_fn: eval_metric_ops may not name a metric {key!r} (the runner adds it)")
        metrics[LOSS_KEY] = tf.compat.v1.metrics.mean(spec.loss)
        update = tf.group(*[u for _, u in metrics.values()])
        values = {k: v for k, (v, _) in metrics.items()}
        values[GLOBAL_STEP_KEY] = gs
        final = tf.compat.v1.train.FinalOpsHook(values)
        with restored_session(scaffold, settings, checkpoint, list(input_hooks) + list(hooks) + [final]) as session:
            while not session.should_stop():
                session.run(update)
        result = final.final_ops_values
        _write_summary(os.path.join(settings.model_dir, f"eval_{name}" if name else "eval"), result, checkpoint)
    return result


def checkpoint_to_restore(settings, checkpoint, purpose):
    """`checkpoint`, else model_dir's latest (its deltas are applied on restore); ValueError naming
    `purpose` when there is none."""
    checkpoint = checkpoint or latest_checkpoint(settings.model_dir)
    if not checkpoint:
        raise ValueError(f"no checkpoint in {settings.model_dir!r} to {purpose}")
    return checkpoint


def restored_session(scaffold, settings, checkpoint, hooks):
    """A MonitoredSession of the default graph with `checkpoint` restored through the scaffold's
    saver (evaluation and prediction)."""
    creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold, checkpoint_filename_with_path=checkpoint,
                                                     master=settings.master, config=settings.config)
    return tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks)


def eval_step():
    """The graph's eval step, a local variable in the EVAL_STEP collection, as tf.estimator makes
    one: what marks a graph as an evaluation (a tfps.pipeline Pipeline then feeds its queues from
    a background thread, since no train op of the graph runs)."""
    return tf.compat.v1.get_variable("eval_step", shape=[], dtype=tf.int64, trainable=False,
                                     initializer=tf.compat.v1.zeros_initializer(),
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
                                                  tf.compat.v1.GraphKeys.EVAL_STEP])


def _write_summary(output_dir, result, checkpoint):
    """The scalar results and the checkpoint's path as a summary at the evaluated global step."""
    summary = tf.compat.v1.Summary()
    for key, value in sorted(result.items()):
        if key != GLOBAL_STEP_KEY and np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.number):
            summary.value.add(tag=key, simple_value=float(value))
    summary.value.add(tag="checkpoint_path", tensor=tf.make_tensor_proto(checkpoint.encode()))
    writer = tf.compat.v1.summary.FileWriterCache.get(output_dir)   # (in a graph: a v1 writer)
    writer.add_summary(summary, int(result[GLOBAL_STEP_KEY]))
    writer.flush()


def evaluate_new_checkpoints(model_fn, params, input_fn, settings, max_steps, on_result, hooks=(),
                             throttle_secs=600, poll_secs=1.0, printer=print):
    """The evaluator: evaluates each checkpoint model_dir gets (at most one every throttle_secs),
    calls on_result(result) after each, and returns once it evaluated one at max_steps or later.
    A checkpoint deleted before it could be read (the chief keeps only the newest few) is skipped."""
    last = None
    while True:
        t0 = time.time()
        ckpt = latest_checkpoint(settings.model_dir)
        if ckpt is not None and ckpt != last:
            last = ckpt
            try:
                result = evaluate(model_fn, params, input_fn, settings, checkpoint=ckpt, hooks=hooks)
            except (tf.errors.NotFoundError, ValueError) as e:
                if tf.io.gfile.exists(ckpt + ".index"):
                    raise
                printer(f"checkpoint {os.path.basename(ckpt)} went before it could be evaluated ({type(e).__name__})",
                        flush=True)
                continue
            on_result(result)
            if max_steps is not None and int(result[GLOBAL_STEP_KEY]) >= max_steps:
                return result
            wait = throttle_secs - (time.time() - t0)
        else:
            wait = poll_secs
        if wait > 0:
            time.sleep(wait)


