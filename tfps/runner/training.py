"""Training a model_fn on tf.compat.v1.train.MonitoredTrainingSession: in one process, or as one
trainer (chief or worker) of a cluster.

The hooks of a run, in the order they run: (chief only) the checkpoint saver with its listeners,
then the summary saver MonitoredTrainingSession adds, then the input's iterator initializer, the
caller's hooks, StopAtStepHook(last_step=...), NanTensorHook on the loss and the spec's
training_hooks (and, without a ProgressHook among them, tfps.runner.steplog's StepLogger:
`step N loss L` on the `tfps.runner` logger). The chief restores the newest cut of model_dir (its StateSaver checks it
first); a worker waits until the model is ready on the PS tasks.

A cluster ends at max_steps exactly: a trainer's run reads the global step before its own
increment and cannot see the increments of other trainers' runs in flight, so trainers that
all stopped on that read would overshoot by up to one step each. The workers stop
`WORKER_MARGIN x trainers` steps early (last_step) and the chief trains the last steps alone, on reads that
are exact once the workers' last steps have landed."""
import os

import tensorflow as tf

from tfps.models.spec import ModeKeys
from tfps.runner.graph import build, checkpoint_global_step
from tfps.runner.hooks import CheckpointSaverHook, ProgressHook, use_spec
from tfps.runner.steplog import StepLogger, default_handler
from tfps.state import deltas, disk
from tfps.state.saver import StateSaver


def train(model_fn, params, input_fn, settings, max_steps, hooks=(), saving_listeners=(), printer=print):
    """Trains until the global step reaches max_steps (or the input ends). Returns the loss of
    the last step this trainer ran (None when it ran none). Like tf.estimator, does nothing when
    model_dir's newest cut (its latest full checkpoint and the deltas after it) is already at
    max_steps; nor does a trainer whose session finds the global step there."""
    try:
        start = deltas.latest_cut(settings.model_dir)[2]
    except ValueError:   # a chain the restore refuses, naming what to move: it raises there
        start = checkpoint_global_step(settings.model_dir)
    if max_steps is not None and start >= max_steps:
        return None
    if settings.is_chief:
        note = disk.unfinished_note(settings.model_dir)
        if note:   # saves a kill cut short: never passed over in silence
            printer(note, flush=True)
        removed = disk.remove_abandoned_saves(settings.model_dir)
        if removed:
            printer(f"{settings.model_dir}: removed {len(removed)} directories of saves that never finished "
                    f"({', '.join(os.path.basename(p) for p in removed)})", flush=True)
    if settings.is_chief and disk.index_stale(settings.model_dir):
        # TensorFlow's restore goes by the `checkpoint` index: a model_dir copied without it (or
        # with an old one) would train from step 0 over its own checkpoints.
        named = disk.named_checkpoint(settings.model_dir)
        gone = named is not None and not tf.io.gfile.glob(named[1] + ".*")
        latest = disk.rewrite_index(settings.model_dir)
        printer(f"{settings.model_dir}: the checkpoint index file "
                f"{'is missing' if named is None else 'names ' + os.path.basename(named[1])}"
                f"{', none of whose files are there' if gone else ''}; resuming from the newest whole checkpoint "
                f"on disk, {os.path.basename(latest)} (index rewritten)", flush=True)
    with tf.Graph().as_default() as graph, graph.device(settings.device_fn):
        spec, scaffold, input_hooks, _ = build(model_fn, params, ModeKeys.TRAIN, settings, input_fn=input_fn)
        use_spec(list(hooks) + list(spec.training_hooks), spec)
        if not any(s.op.name == "loss" for s in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)):
            tf.compat.v1.summary.scalar("loss", spec.loss)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOSSES, spec.loss)
        there = _AtLastStep(last_step(max_steps, settings))
        worker_hooks = list(input_hooks) + list(hooks) + [
            tf.compat.v1.train.StopAtStepHook(last_step=last_step(max_steps, settings)), there,
            tf.compat.v1.train.NanTensorHook(spec.loss)] + list(spec.training_hooks)
        if not any(isinstance(h, ProgressHook) for h in worker_hooks):   # a program of the user's own
            default_handler()
            worker_hooks.append(StepLogger(spec.loss, settings.save_summary_steps))
        chief_hooks = _saver_hooks(settings, scaffold, worker_hooks, saving_listeners)
        if settings.master and isinstance(scaffold.saver, StateSaver):
            # A trainer that goes on from the live state after its task or session died counts
            # the step it may have left half-applied (StateSaver.rejoin_hook): the chief's before
            # its saver hook's first save (a chief's hooks run first).
            rejoin = scaffold.saver.rejoin_hook(settings.trainer_rank, printer)
            chief_hooks, worker_hooks = ([rejoin] + chief_hooks, worker_hooks) if settings.is_chief else (
                chief_hooks, worker_hooks + [rejoin])
        loss, steps = None, 0
        with _session(settings, scaffold, worker_hooks, chief_hooks) as session:
            while not session.should_stop() and not there.reached:
                steps += 1
                _, loss = session.run([spec.train_op, spec.loss])
        if steps == 0 and settings.is_chief:   # (a worker may start after its last step)
            printer("training made no steps: is the input empty?", flush=True)
        return loss


class _AtLastStep(tf.compat.v1.train.SessionRunHook):
    """`reached`: the global step the (re)created session starts at is already the last step
    (StopAtStepHook looks only after a step, which would train one step too many)."""

    def __init__(self, last):
        self._last, self.reached = last, False

    def begin(self):
        self._step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        del coord
        self.reached = self._last is not None and self._step is not None and session.run(self._step) >= self._last


READY_POLL_SECS = 0.5   # how often a worker asks whether the model is ready on the PS tasks


def _session(settings, scaffold, worker_hooks, chief_hooks):
    """The trainer's MonitoredSession: the chief's as MonitoredTrainingSession makes it (it
    initializes or restores the model); another trainer's waits for the model to be ready on the
    PS tasks, asking every READY_POLL_SECS (MonitoredTrainingSession's worker asks every 30 s: a
    worker that first asked before the chief's restore idled 30 s, as good as absent from a short
    job)."""
    if settings.is_chief or not settings.master:
        return tf.compat.v1.train.MonitoredTrainingSession(
            master=settings.master, is_chief=settings.is_chief, checkpoint_dir=settings.model_dir,
            scaffold=scaffold, hooks=worker_hooks, chief_only_hooks=chief_hooks,
            save_checkpoint_secs=0,   # the saver hook saves
            save_summaries_steps=settings.save_summary_steps, config=settings.config,
            max_wait_secs=settings.session_creation_timeout_secs, log_step_count_steps=None)
    return tf.compat.v1.train.MonitoredSession(
        session_creator=_WorkerSessionCreator(scaffold, settings.master, settings.config,
                                              settings.session_creation_timeout_secs),
        hooks=worker_hooks)


class _WorkerSessionCreator(tf.compat.v1.train.SessionCreator):
    """A session on a cluster whose model another trainer (the chief) initializes or restores:
    waits until the scaffold's ready op says the model is ready, asking every READY_POLL_SECS,
    then runs the local init op (tf.compat.v1.train.WorkerSessionCreator's work, on a short poll)."""

    def __init__(self, scaffold, master, config, max_wait_secs):
        self._scaffold, self._master, self._config, self._max_wait_secs = scaffold, master, config, max_wait_secs

    def create_session(self):
        self._scaffold.finalize()
        manager = tf.compat.v1.train.SessionManager(
            local_init_op=self._scaffold.local_init_op, local_init_feed_dict=self._scaffold.local_init_feed_dict,
            ready_op=self._scaffold.ready_op, ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
            graph=tf.compat.v1.get_default_graph(), recovery_wait_secs=READY_POLL_SECS)
        return manager.wait_for_session(self._master, config=self._config, max_wait_secs=self._max_wait_secs)


def last_step(max_steps, settings):
    """The global step at which this trainer stops: max_steps for the chief (and one process),
    WORKER_MARGIN x trainers fewer for the other trainers of a cluster (see above)."""
    if max_steps is None or settings.is_chief or settings.num_worker_replicas <= 1:
        return max_steps
    return max(max_steps - WORKER_MARGIN * settings.num_worker_replicas, 0)


# Steps per trainer that the workers stop before max_steps. A worker's last step, begun before
# its stop, must land before the chief's last read: the chief's steps alone in between are the
# time it may take. 2 per trainer (half this) let a worker's step stalled under a loaded machine
# (5 tasks on 2 cores beside other tests) land after the chief's last read: a job of 800 ended at 801.
WORKER_MARGIN = 4


def _saver_hooks(settings, scaffold, worker_hooks, saving_listeners):
    """The chief's checkpoint saver (tfps.runner.hooks.CheckpointSaverHook) with the saving
    listeners (its listeners= argument), unless a hook of the run is one already: that hook
    takes its listeners in its own constructor, and saving listeners beside it are refused."""
    savers = [h for h in worker_hooks if isinstance(h, tf.compat.v1.train.CheckpointSaverHook)]
    if savers and saving_listeners:
        raise ValueError(f"saving listeners beside a {type(savers[0]).__name__} of the run's hooks: give them to "
                         f"that hook (its listeners= argument), not to train(saving_listeners=...)")
    if savers:
        return []
    if settings.save_checkpoints_steps or settings.save_checkpoints_secs:
        return [CheckpointSaverHook(settings.model_dir, save_secs=settings.save_checkpoints_secs,
                                    save_steps=settings.save_checkpoints_steps, scaffold=scaffold,
                                    listeners=list(saving_listeners))]
    if saving_listeners:
        raise ValueError("saving listeners need full checkpoints: set train.save_checkpoints_steps or "
                         "train.save_checkpoints_secs")
    return []
