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


class EvictionHook(tf.compat.v1.train.SessionRunHook):
    """Runs the eviction rules (tfps.EmbeddingOptions) of every embedding variable of the graph
    every `every_n_steps` global steps, and logs how many rows went."""

    def __init__(self, every_n_steps, printer=print):
        if not isinstance(every_n_steps, int) or every_n_steps <= 0:
            raise ValueError(f"EvictionHook: every_n_steps must be a positive int, got {every_n_steps!r}")
        self._every, self._print = every_n_steps, printer
        self.evicted = 0

    def begin(self):
        from tfps.embedding.variable import embedding_variables
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        evs = [ev for ev in embedding_variables() if ev.options.evicts]
        self._evict = tf.add_n([ev.evict(self._gs) for ev in evs]) if evs else None
        self._last = None

    def after_run(self, run_context, run_values):
        if self._evict is None:
            return
        step = run_context.session.run(self._gs)
        if step % self._every == 0 and step != self._last:
            self._last = step
            n = run_context.session.run(self._evict)
            self.evicted += int(n)
            self._print(f"step {step} evicted {n} rows", flush=True)
