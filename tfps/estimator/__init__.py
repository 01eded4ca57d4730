"""tfps for tf.estimator users (TensorFlow 2.15, the last line that ships it): an Estimator of a
tfps model_fn (runner.make_estimator; any tfps ModelSpec becomes an EstimatorSpec through
adapter.estimator_model_fn), and the session hooks, which live in tfps.runner and are the same
objects here. tfps's own commands run on tfps.runner, without tf.estimator."""
import tensorflow as tf

if not hasattr(tf, "estimator") or not hasattr(tf.estimator, "Estimator"):
    raise ImportError(f"tfps.estimator needs tf.estimator, which TensorFlow {tf.__version__} does not have (it was "
                      f"removed in 2.16): use tfps.runner, or TensorFlow 2.15 for Estimators")

from tfps.estimator.adapter import estimator_model_fn, pipelined_input_fn, to_estimator_spec  # noqa: E402
from tfps.runner.hooks import CheckpointSaverHook, EvictionHook, ProgressHook, StepStatsHook  # noqa: E402
from tfps.runner.step_trace import rpc_stats, step_phases  # noqa: E402
from tfps.runner.incremental import DeltaRestoreHook, IncrementalCheckpoints  # noqa: E402

__all__ = ["CheckpointSaverHook", "DeltaRestoreHook", "EvictionHook", "IncrementalCheckpoints", "ProgressHook",
           "StepStatsHook", "estimator_model_fn", "pipelined_input_fn", "rpc_stats", "step_phases", "to_estimator_spec"]
