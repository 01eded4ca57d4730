"""tfps's runner: train, evaluate and export a model_fn on tf.compat.v1.train.MonitoredTrainingSession
and the SavedModel Builder -- in one process or as one task of a TF_CONFIG cluster -- with no
tf.estimator anywhere on its path (it runs on every TensorFlow tfps supports).

    spec = model_fn(features, labels, mode, params)     # a tfps.runner.ModelSpec
    tfps.runner.train(model_fn, params, input_fn, tfps.runner.RunSettings(model_dir), max_steps=1000)
    tfps.runner.evaluate(model_fn, params, eval_input_fn, settings)
    for batch in tfps.runner.predict(model_fn, params, predict_input_fn, settings): ...

Modules: graph (settings, inputs, the checked scaffold), training, evaluation, prediction, export, hooks and
incremental (session hooks), job (a JobConfig on the runner), local (`tfps train` in one process),
cluster and task (one TF_CONFIG task)."""
from tfps._lazy import attach

_NAMES = {
    **{name: "tfps.models.spec" for name in ("ModeKeys", "ModelSpec", "PredictOutput")},
    "RunSettings": "tfps.runner.graph",
    "train": "tfps.runner.training",
    **{name: "tfps.runner.evaluation" for name in ("evaluate", "evaluate_new_checkpoints")},
    "export_saved_model": "tfps.runner.export",
    "predict": "tfps.runner.prediction",
    **{name: "tfps.runner.hooks" for name in ("CheckpointSaverHook", "EvalProgressHook", "EvictionHook", "ProgressHook",
                                              "StepStatsHook")},
    **{name: "tfps.runner.step_trace" for name in ("rpc_stats", "step_phases")},
    **{name: "tfps.runner.incremental" for name in ("DeltaRestoreHook", "IncrementalCheckpoints")},
}
__getattr__, __dir__ = attach(__name__, _NAMES)

__all__ = sorted(_NAMES)
