"""Predicting with a model_fn from a checkpoint: the model's PREDICT graph over an input_fn,
restored once (MonitoredSession), one dict of numpy arrays per batch -- what
tf.estimator.Estimator.predict(..., yield_single_examples=False) gives."""
import tensorflow as tf

from tfps.models.spec import ModeKeys
from tfps.runner.evaluation import checkpoint_to_restore, eval_step, restored_session
from tfps.runner.graph import build


def predict(model_fn, params, input_fn, settings, checkpoint=None):
    """An iterator of {name: array}, the spec's predictions for each batch of input_fn (features,
    or (features, labels) whose labels are ignored), from `checkpoint` (default: model_dir's
    latest, with the deltas after it). ValueError (at the call) when there is no checkpoint."""
    checkpoint = checkpoint_to_restore(settings, checkpoint, "predict from")
    return _predictions(model_fn, params, input_fn, settings, checkpoint)


def _predictions(model_fn, params, input_fn, settings, checkpoint):
    with tf.Graph().as_default():
        eval_step()   # no train op runs here: a PipelineDataset feeds itself (as in an evaluation)
        spec, scaffold, input_hooks, _ = build(model_fn, params, ModeKeys.PREDICT, settings, input_fn=input_fn)
        predictions = spec.predictions if isinstance(spec.predictions, dict) else {"predictions": spec.predictions}
        with restored_session(scaffold, settings, checkpoint, list(input_hooks)) as session:
            while not session.should_stop():
                try:
                    yield session.run(predictions)
                except tf.errors.OutOfRangeError:   # the input ended
                    break
