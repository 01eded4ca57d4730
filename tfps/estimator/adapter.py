"""A tfps model_fn (returning a tfps.models.spec.ModelSpec) as a tf.estimator model_fn, and an
input_fn returning a tfps PipelineDataset as a tf.estimator input_fn.

tf.estimator calls the input_fn and the model_fn itself, in one graph; the graph's
tfps.embedding.ModelGraph carries the pipeline from one to the other: pipelined_input_fn puts
the PipelineDataset's stager and push policy into the ModelGraph's step, and estimator_model_fn
builds the model in the push policy's dense scope and runs the pipeline's initializer when the
session starts (as tfps.runner does)."""
import contextlib
import inspect

import tensorflow as tf

from tfps.embedding.model_graph import ModelGraph
from tfps.models.spec import ModelSpec
from tfps.pipeline.dataset import PipelineDataset
from tfps.runner.graph import IteratorInitializer


def to_estimator_spec(spec):
    """The tf.estimator.EstimatorSpec of a ModelSpec (an EstimatorSpec is returned as it is)."""
    if isinstance(spec, tf.estimator.EstimatorSpec):
        return spec
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"model_fn must return a tfps ModelSpec or an EstimatorSpec, got {type(spec).__name__}")
    spec = spec.checked()
    return tf.estimator.EstimatorSpec(spec.mode, predictions=spec.predictions, loss=spec.loss, train_op=spec.train_op,
                                      eval_metric_ops=spec.eval_metric_ops, export_outputs=spec.export_outputs,
                                      training_hooks=spec.training_hooks, scaffold=spec.scaffold)


def pipelined_input_fn(input_fn):
    """input_fn as a tf.estimator input_fn; when it returns a tfps PipelineDataset, its pipeline
    is built, put into the graph's ModelGraph step, and its batch returned (train the model with
    estimator_model_fn or tfps.estimator.runner.with_checked_saver). input_fn takes any of
    mode, params, config, as tf.estimator passes them."""
    names = set(inspect.signature(input_fn).parameters)

    def fn(mode=None, params=None, config=None):
        given = {"mode": mode, "params": params, "config": config}
        result = input_fn(**{k: v for k, v in given.items() if k in names})
        if not isinstance(result, PipelineDataset):
            return result
        pipeline = result.pipeline()
        ModelGraph.of().step.use(pipeline, pipeline.push)
        return pipeline.get_next()
    return fn


def call_model_fn(model_fn, features, labels, mode, params, config=None):
    """model_fn's result, built in the dense scope of the graph's pipeline (if any), and the hooks
    that start the pipeline: (spec, hooks). With the Estimator's RunConfig of a cluster, the
    tables must be on the PS tasks (check_placement)."""
    step = ModelGraph.of().step
    with step.push.dense_scope() if step.push is not None else contextlib.nullcontext():
        spec = model_fn(features, labels, mode, params)
    if mode == tf.estimator.ModeKeys.TRAIN:   # (tf.estimator applies its device function to training only)
        check_placement(config)
    if isinstance(spec, ModelSpec):   # the batch's examples, for the progress hooks
        ModelGraph.of().examples = spec.examples
    return spec, ((IteratorInitializer(step.stager),) if step.stager is not None else ())


def check_placement(config):
    """ValueError when a RunConfig of a cluster (PS tasks, a master) left a tfps table off the PS
    tasks: tf.estimator's own device function places variables only, so each trainer would hold
    a table of its own, and a worker would wait forever for one that only it can see."""
    if config is None or not config.master or not config.num_ps_replicas:
        return
    for table in ModelGraph.of().tables.values():
        for handle in table.handles:
            if tf.DeviceSpec.from_string(handle.device or "").job != "ps":
                raise ValueError(
                    f"tfps table {table.name!r} is placed on {handle.device or 'no device'!r}, not on a PS task: on "
                    f"a cluster, give the Estimator's RunConfig device_fn=tfps.cluster.replica_device_setter("
                    f"cluster=config.cluster_spec, worker_device=...) (tf.estimator's own places variables only)")


def with_input_hooks(spec, hooks):
    """The EstimatorSpec with `hooks` among those of its mode."""
    if not hooks:
        return spec
    field = {tf.estimator.ModeKeys.TRAIN: "training_hooks", tf.estimator.ModeKeys.EVAL: "evaluation_hooks",
             tf.estimator.ModeKeys.PREDICT: "prediction_hooks"}[spec.mode]
    return spec._replace(**{field: tuple(getattr(spec, field)) + tuple(hooks)})


def estimator_model_fn(model_fn):
    """model_fn(features, labels, mode, params) -> ModelSpec, as a tf.estimator model_fn."""
    def fn(features, labels, mode, params, config):
        spec, hooks = call_model_fn(model_fn, features, labels, mode, params, config)
        return with_input_hooks(to_estimator_spec(spec), hooks)
    return fn
