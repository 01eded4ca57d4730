"""tf.estimator over tfps's models: make_estimator(cfg) is an Estimator of a JobConfig's model
that saves and restores through tfps.state.StateSaver, as tfps's runner does; its checkpoints are
the runner's (the same files and names). `tfps train` and `tfps export` themselves run on
tfps.runner."""
import tensorflow as tf

from tfps.estimator.adapter import call_model_fn, to_estimator_spec, with_input_hooks
from tfps.models.zoo import model_fn
from tfps.runner import job
from tfps.runner.export import sequence_serving_inputs, serving_inputs
from tfps.runner.graph import state_saver
from tfps.runner.hooks import CheckpointSaverHook
from tfps.runner.job import params_of
from tfps.state import disk


def serving_input_receiver_fn(schema):
    """Raw-tensor serving inputs of a schema (tfps.runner.export.serving_inputs) for an Estimator's
    export_saved_model."""
    def fn():
        inputs = serving_inputs(schema)
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return fn


def sequence_serving_input_receiver_fn():
    """MTGR's serving inputs (tfps.runner.export.sequence_serving_inputs) for an Estimator."""
    def fn():
        inputs = sequence_serving_inputs()
        return tf.estimator.export.ServingInputReceiver(inputs, inputs)
    return fn


def checkpoint_every(cfg):
    """RunConfig's checkpoint frequency (train.save_checkpoints_secs if set, else _steps) and seed."""
    every = job.checkpoint_every(cfg)
    return {"save_checkpoints_secs": every["save_checkpoints_secs"],
            "save_checkpoints_steps": every["save_checkpoints_steps"], "tf_random_seed": every["seed"]}


def make_estimator(cfg, run_config=None):
    """A tf.estimator.Estimator of cfg's model (tfps.models.zoo.model_fn) in cfg.model_dir."""
    run_config = run_config or tf.estimator.RunConfig(
        model_dir=cfg.model_dir, **checkpoint_every(cfg), keep_checkpoint_max=cfg.train.keep_checkpoint_max,
        log_step_count_steps=None)   # TF's thread pools: one thread per core of this machine
    return tf.estimator.Estimator(model_fn=with_checked_saver(model_fn, cfg.train.keep_checkpoint_max),
                                  params=params_of(cfg), config=run_config)


def with_checked_saver(model_fn, keep_checkpoint_max):
    """model_fn (returning a tfps ModelSpec or an EstimatorSpec) as an Estimator model_fn whose
    EstimatorSpec saves and restores through tfps.state.StateSaver (checkpoints with the model's
    manifest; a restore of the newest cut -- the latest checkpoint and its deltas -- checked
    against the model before anything changes, exactly for training, the model's variables alike
    for evaluation and export), unless it brings its own saver, and saves through
    tfps.runner.hooks.CheckpointSaverHook (no session.run of its own each step), unless it
    brings its own saver hook. A saver hook passed to train(hooks=...) is not seen here (both
    would save): give yours in the EstimatorSpec instead."""
    def fn(features, labels, mode, params, config):
        if mode == tf.estimator.ModeKeys.TRAIN and config.is_chief and disk.index_stale(config.model_dir):
            # The Estimator restores what the `checkpoint` index names: a model_dir copied without
            # it would train from step 0 over its own checkpoints (tfps.state.disk).
            disk.rewrite_index(config.model_dir)
        spec, input_hooks = call_model_fn(model_fn, features, labels, mode, params, config)
        spec = with_input_hooks(to_estimator_spec(spec), input_hooks)
        if spec.scaffold.saver is None:
            saver = state_saver(mode == tf.estimator.ModeKeys.TRAIN, keep_checkpoint_max, config.num_worker_replicas)
            spec = spec._replace(scaffold=tf.compat.v1.train.Scaffold(saver=saver, copy_from_scaffold=spec.scaffold))
            if mode == tf.estimator.ModeKeys.TRAIN and config.master:
                # a trainer of a cluster (the chief: 0, workers: 1, 2, ...): after a kill it counts
                # the step it may have left half-applied (StateSaver.rejoin_hook); the chief's
                # before its saver hook's first save (tf.estimator runs the chief's hooks first)
                rejoin = saver.rejoin_hook(config.global_id_in_cluster)
                if config.is_chief:
                    spec = spec._replace(training_chief_hooks=(rejoin,) + tuple(spec.training_chief_hooks))
                else:
                    spec = spec._replace(training_hooks=tuple(spec.training_hooks) + (rejoin,))
        hooks = list(spec.training_chief_hooks) + list(spec.training_hooks)
        if (mode == tf.estimator.ModeKeys.TRAIN and (config.save_checkpoints_secs or config.save_checkpoints_steps)
                and not any(isinstance(h, tf.compat.v1.train.CheckpointSaverHook) for h in hooks)):
            # Configured as the hook tf.estimator would add (it adds none when the spec has one).
            hook = CheckpointSaverHook(config.model_dir, save_secs=config.save_checkpoints_secs,
                                       save_steps=config.save_checkpoints_steps, scaffold=spec.scaffold,
                                       save_graph_def=config.checkpoint_save_graph_def)
            spec = spec._replace(training_chief_hooks=tuple(spec.training_chief_hooks) + (hook,))
        return spec
    return fn


def final_metrics(cfg, source, printer, estimator=None, name=None):
    """tfps.runner.job.final_metrics; with an Estimator, evaluated by it."""
    if estimator is None:
        return job.final_metrics(cfg, source, printer, name=name)

    def evaluation(input_fn, hooks, name):
        ckpt = estimator.latest_checkpoint()
        if not ckpt:
            raise ValueError(f"no checkpoint in {estimator.model_dir!r} to evaluate")
        return estimator.evaluate(input_fn, hooks=hooks, name=name), ckpt
    return job.final_metrics(cfg, source, printer, evaluation, name)


__all__ = ["make_estimator", "with_checked_saver", "serving_input_receiver_fn", "sequence_serving_input_receiver_fn",
           "final_metrics"]
