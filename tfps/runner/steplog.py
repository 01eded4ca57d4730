"""The progress log of tfps.runner.train when its caller gives no ProgressHook (a program of the
user's own): `step N loss L (S steps/s)` at INFO on the `tfps.runner` logger, every n global
steps.

When logging has not been configured (the root logger and the `tfps` logger have no handler),
the `tfps` logger gets one on stderr at INFO, as TensorFlow does for its own: set the `tfps`
logger's level (or configure logging) to change it."""
import logging
import time

import tensorflow as tf

LOGGER = logging.getLogger("tfps.runner")


def default_handler():
    """A stderr handler at INFO on the `tfps` logger, unless logging is configured already."""
    base = logging.getLogger("tfps")
    if not base.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        base.addHandler(handler)
        if base.level == logging.NOTSET:
            base.setLevel(logging.INFO)


class StepLogger(tf.compat.v1.train.SessionRunHook):
    """Logs `step N loss L (S steps/s)` each time the global step passes a multiple of
    every_n_steps (the step after this run: the read before the increment, plus one)."""

    def __init__(self, loss, every_n_steps=100, logger=LOGGER):
        self._loss, self._every, self._logger = loss, max(int(every_n_steps), 1), logger

    def begin(self):
        self._gs = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        step = int(session.run(self._gs))
        self._logged, self._since = step // self._every, (step, time.time())

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs([self._gs, self._loss])

    def after_run(self, run_context, run_values):
        step, loss = run_values.results
        step = int(step) + 1
        if step // self._every > self._logged:
            self._logged = step // self._every
            now = time.time()
            rate = (step - self._since[0]) / max(now - self._since[1], 1e-9)
            self._since = (step, now)
            self._logger.info("step %d loss %.4f (%.1f steps/s)", step, float(loss), rate)
