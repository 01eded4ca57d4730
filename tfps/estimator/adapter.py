"""A tfps model_fn (returning a tfps.models.spec.ModelSpec) as a tf.estimator model_fn."""
import tensorflow as tf

from tfps.models.spec import ModelSpec


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


def estimator_model_fn(model_fn):
    """model_fn(features, labels, mode, params) -> ModelSpec, as a tf.estimator model_fn."""
    def fn(features, labels, mode, params):
        return to_estimator_spec(model_fn(features, labels, mode, params))
    return fn
