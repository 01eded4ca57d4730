"""Session hooks: progress logs of step, loss and examples/s."""
import time

import tensorflow as tf

# model_fns add their training loss (a scalar) to this graph collection for ProgressHook.
LOSS_COLLECTION = "tfps_training_loss"


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Prints `step N loss L examples/s X` every `every_n_steps` and keeps the overall rate.

    The loss is the scalar a model_fn added to LOSS_COLLECTION.
    examples_per_sec excludes the first logging window (graph warm-up).
    """

    def __init__(self, batch_size, every_n_steps, printer=print):
        self._batch, self._every, self._print = batch_size, every_n_steps, printer
        self.examples_per_sec = None
        self.last_loss = None

    def begin(self):
        self._gs = tf.compat.v1.train.get_global_step()
        losses = tf.compat.v1.get_collection(LOSS_COLLECTION)
        if len(losses) != 1:
            raise ValueError(f"ProgressHook: the model_fn must add exactly one loss to the "
                             f"'{LOSS_COLLECTION}' collection, found {len(losses)}")
        self._loss = losses[0]

    def after_create_session(self, session, coord):
        self._start_step = session.run(self._gs)
        self._t0 = self._tw = time.time()
        self._w0 = self._start_step
        self._steady = None

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs([self._gs, self._loss])

    def after_run(self, run_context, run_values):
        step, loss = run_values.results
        step += 1
        self.last_loss = float(loss)
        if step % self._every == 0:
            now = time.time()
            rate = (step - self._w0) * self._batch / max(now - self._tw, 1e-9)
            self._print(f"step {step} loss {loss:.4f} examples/s {rate:.0f}", flush=True)
            if self._steady is None:
                self._steady = (step, now)
            self._tw, self._w0 = now, step
        self._last = (step, time.time())

    def end(self, session):
        if self._steady is not None and self._last[0] > self._steady[0]:
            step0, t0 = self._steady
        else:
            step0, t0 = self._start_step, self._t0
        step, t = self._last
        self.examples_per_sec = (step - step0) * self._batch / max(t - t0, 1e-9)
