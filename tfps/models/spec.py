"""What a tfps model_fn returns: a ModelSpec, a plain tfps object with no tf.estimator type, that
tfps.runner trains, evaluates and exports (and tfps.estimator turns into an EstimatorSpec where
tf.estimator exists).

    def model_fn(features, labels, mode, params):    # mode: a ModeKeys value
        logits = ...
        if mode == ModeKeys.PREDICT:
            return ModelSpec(mode, predictions={"probabilities": tf.sigmoid(logits)})
        loss = ...
        if mode == ModeKeys.EVAL:
            return ModelSpec(mode, loss=loss, eval_metric_ops={"auc": tf.compat.v1.metrics.auc(labels, p)})
        return ModelSpec(mode, loss=loss, train_op=optimizer.minimize(loss, global_step=gs))
"""
import typing

from tensorflow.python.saved_model.model_utils import export_output

# PredictOutput (one signature's outputs) is TF's own, on every TF line tfps supports.
PredictOutput = export_output.PredictOutput
SERVING_SIGNATURE = "serving_default"


class ModeKeys:
    """The three modes of a model_fn; the same strings as tf.estimator.ModeKeys, so a model_fn
    compares either's mode alike."""
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"
    ALL = (TRAIN, EVAL, PREDICT)


class ModelSpec(typing.NamedTuple):
    """A model_fn's result for one mode.

    mode:            ModeKeys.TRAIN, EVAL or PREDICT.
    predictions:     PREDICT: {name: Tensor [B, ...]}.
    loss:            TRAIN and EVAL: a float32 scalar.
    train_op:        TRAIN: the op one training step runs.
    eval_metric_ops: EVAL: {name: (value tensor, update op)} (tf.compat.v1.metrics style).
    export_outputs:  PREDICT: {signature key: PredictOutput}; default: the predictions under
                     SERVING_SIGNATURE.
    training_hooks:  TRAIN: SessionRunHooks of every trainer.
    scaffold:        a tf.compat.v1.train.Scaffold (its saver, if any, is the one the runner
                     saves and restores with), or None.
    examples:        TRAIN and EVAL: the examples of the step's batch, an int32 scalar (the
                     runner's progress rates; batches of a token budget vary in size), or None
                     (each step is the configured batch size).
    """
    mode: str
    predictions: typing.Optional[dict] = None
    loss: typing.Any = None
    train_op: typing.Any = None
    eval_metric_ops: typing.Optional[dict] = None
    export_outputs: typing.Optional[dict] = None
    training_hooks: tuple = ()
    scaffold: typing.Any = None
    examples: typing.Any = None

    def checked(self):
        """This spec with export_outputs filled in for PREDICT; ValueError naming what a mode
        lacks (a loss, a train_op, predictions)."""
        if self.mode not in ModeKeys.ALL:
            raise ValueError(f"ModelSpec: mode {self.mode!r} is none of {ModeKeys.ALL}")
        if self.mode == ModeKeys.PREDICT:
            if not self.predictions:
                raise ValueError("ModelSpec: a PREDICT spec needs predictions")
            outputs = self.export_outputs or {SERVING_SIGNATURE: PredictOutput(self.predictions)}
            return self._replace(export_outputs=outputs)
        if self.loss is None:
            raise ValueError(f"ModelSpec: a {self.mode.upper()} spec needs a loss")
        if self.mode == ModeKeys.TRAIN and self.train_op is None:
            raise ValueError("ModelSpec: a TRAIN spec needs a train_op")
        return self
