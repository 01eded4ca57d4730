"""Session hooks: progress of training (step, loss, examples/s, ETA) and of evaluation."""
import hashlib
import os
import time

import tensorflow as tf

from tfps.embedding.model_graph import ModelGraph
from tfps.runner.step_trace import messages_by_task, rpc_stats, step_phases


def duration(seconds):
    """'1h02m', '3m05s', '42s'."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class CheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """tf.compat.v1.train.CheckpointSaverHook that decides whether a step-based save is due from
    the global step its step's run fetched, and reads the global step itself only then.

    With save_steps, TF's hook reads the global step with a session.run of its own after every
    step (it leaves steps_per_run at 10^6 unless told otherwise, to always check the actual
    step): in a cluster one more run per step, a round trip to the global step's PS (5 ms a step
    at 2 ms one-way). Here steps_per_run is 1: the fetched value plus one is taken as the step
    the run made, which holds when the increment runs after the fetched read (tfps's optimizers
    order it so, as TF's own increment does, when the read runs beside the global step: in one
    process and under tfps.cluster.replica_device_setter; otherwise a save can cost one extra
    read, a step early). With one trainer it saves at TF's steps; with several, up to one chief run later (a
    run in which the other trainers' steps also count). It always saves the global step it then
    reads, as TF's does; save_secs works as in TF's. The tfps runners' estimators use it
    (runner.with_checked_saver); in an Estimator of your own, put one in the EstimatorSpec's
    training_chief_hooks (tf.estimator then adds none)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._set_steps_per_run(1)

    def after_create_session(self, session, coord):
        """As TF's (the graph as graph.pbtxt and in the events for TensorBoard, then a save of
        the step the session starts at), except that the graph is written only when it is not
        the one written last (its digest in graph.sha256): a text dump of a model's graph costs
        about a second of CPU, on every start and restart of a trainer. (The events get the graph
        at every start anyway: the summary writer adds it when it opens a new events file.)"""
        global_step = session.run(self._global_step_tensor)
        graph = tf.compat.v1.get_default_graph()
        graph_def = graph.as_graph_def(add_shapes=True)
        digest = hashlib.sha256(graph_def.SerializeToString(deterministic=True)).hexdigest()
        digest_path = os.path.join(self._checkpoint_dir, "graph.sha256")
        text = os.path.join(self._checkpoint_dir, "graph.pbtxt")
        if _read_text(digest_path) != digest or (self._save_graph_def and not tf.io.gfile.exists(text)):
            if self._save_graph_def:
                tf.io.write_graph(graph_def, self._checkpoint_dir, "graph.pbtxt")
            saver = self._get_saver()
            self._summary_writer.add_graph(graph)
            self._summary_writer.add_meta_graph(tf.compat.v1.train.export_meta_graph(
                graph_def=graph_def, saver_def=saver.saver_def if saver else None, graph=graph))
            self._summary_writer.flush()   # on disk before the digest says so (a kill -9 may come next)
            with tf.io.gfile.GFile(digest_path + ".tmp", "w") as f:
                f.write(digest)
            tf.io.gfile.rename(digest_path + ".tmp", digest_path, overwrite=True)
        self._save(session, global_step)   # the state at global_step
        self._timer.update_last_triggered_step(global_step)


def _read_text(path):
    try:
        with tf.io.gfile.GFile(path) as f:
            return f.read()
    except tf.errors.NotFoundError:
        return None


class SpecHook(tf.compat.v1.train.SessionRunHook):
    """A hook that reads what the model_fn returned: the runner hands it the run's ModelSpec
    (use_spec) once the model is built, before the session starts."""
    spec = None

    def use_spec(self, spec):
        self.spec = spec


def use_spec(hooks, spec):
    """Hands `spec` to every SpecHook of `hooks`."""
    for hook in hooks:
        if isinstance(hook, SpecHook):
            hook.use_spec(spec)


class ProgressHook(SpecHook):
    """Prints `step N/M (P%) loss L examples/s X eta T` each time the global step passes a multiple
    of `every_n_steps`, and keeps the rates of the run (M = max_steps, when given).

    The loss is the ModelSpec's (the runner hands the spec: use_spec). On a cluster the global step
    counts every worker's steps: `examples/s` is the job's rate, and with task_rate=True the line
    also gives this task's own (`this task Y`). Rates exclude the first logging window (graph
    warm-up). After a session is re-created (a PS restarted) the windows start again.

    Examples are counted per step when the ModelSpec carries its batch's count (`examples`;
    token-budget batches vary in size); other workers' steps are
    taken to hold as many as this task's on average. Without it a step is `batch_size` examples.
    """

    def __init__(self, batch_size, every_n_steps, printer=print, task_rate=False, max_steps=None):
        self._batch, self._every, self._print, self._task_rate = batch_size, every_n_steps, printer, task_rate
        self._max_steps = max_steps
        self.examples_per_sec = None        # all workers (global steps)
        self.task_examples_per_sec = None   # this task's own steps
        self.local_steps = 0
        self.local_examples = 0
        self.last_loss = None
        # The window examples_per_sec is measured over: wall-clock start and end (time.time()), the
        # global steps and examples (every worker's) in it, and the CPU seconds this process used
        # in it (time.process_time). None until the session ends.
        self.steady_window = None

    def begin(self):
        self._gs = tf.compat.v1.train.get_global_step()
        if self.spec is None or self.spec.loss is None:
            raise ValueError("ProgressHook: it reads the loss of the run's ModelSpec, and was handed none "
                             "(tfps.runner.training.train hands it; elsewhere call use_spec(spec) before the session)")
        self._loss = self.spec.loss
        self._count = self.spec.examples if self.spec.examples is not None else tf.constant(self._batch)

    def after_create_session(self, session, coord):
        step = int(session.run(self._gs))
        # (global step, local steps, time, local examples, this process's CPU seconds) at the session
        # start, the last log line and the last step
        self._start = self._window = self._last = (step, self.local_steps, time.time(), self.local_examples,
                                                   time.process_time())
        self._steady = None
        self._logged = step // self._every

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs([self._gs, self._loss, self._count])

    def after_run(self, run_context, run_values):
        step, loss, count = run_values.results
        step = int(step) + 1
        self.local_steps += 1
        self.local_examples += int(count)
        self.last_loss = float(loss)
        self._last = (step, self.local_steps, time.time(), self.local_examples, time.process_time())
        if step // self._every > self._logged:
            self._logged = step // self._every
            global_rate, task_rate = self._rates(self._window, self._last)
            if self._max_steps:
                eta = (self._max_steps - step) * self.examples_per_step / max(global_rate, 1e-9)
                line = (f"step {step}/{self._max_steps} ({100 * step / self._max_steps:.0f}%) loss {loss:.4f} "
                        f"examples/s {global_rate:.0f}" + (f" (this task {task_rate:.0f})" if self._task_rate else "")
                        + f" eta {duration(eta)}")
            else:
                line = f"step {step} loss {loss:.4f} examples/s {global_rate:.0f}" + (
                    f" (this task {task_rate:.0f})" if self._task_rate else "")
            self._print(line, flush=True)
            if self._steady is None:
                self._steady = self._last
            self._window = self._last

    @property
    def examples_per_step(self):
        """This task's mean examples per step (batch_size before its first step)."""
        return self.local_examples / self.local_steps if self.local_steps else float(self._batch)

    def _rates(self, a, b):
        seconds = max(b[2] - a[2], 1e-9)
        per_step = (b[3] - a[3]) / (b[1] - a[1]) if b[1] > a[1] else self.examples_per_step
        return (b[0] - a[0]) * per_step / seconds, (b[3] - a[3]) / seconds

    def end(self, session):
        first = self._steady if self._steady is not None and self._last[1] > self._steady[1] else self._start
        self.examples_per_sec, self.task_examples_per_sec = self._rates(first, self._last)
        per_step = ((self._last[3] - first[3]) / (self._last[1] - first[1]) if self._last[1] > first[1]
                    else self.examples_per_step)
        self.steady_window = {"start": round(first[2], 3), "end": round(self._last[2], 3),
                              "global_steps": self._last[0] - first[0],
                              "examples": int(round((self._last[0] - first[0]) * per_step)),
                              "process_cpu_seconds": round(self._last[4] - first[4], 3)}


class EvalProgressHook(SpecHook):
    """Prints how far an evaluation is, at most every `every_secs`: `eval: N of M examples (P%),
    X examples/s` (`N examples` when the eval set's size is unknown). `examples` holds the count:
    the ModelSpec's per batch (the runner hands the spec; without one, the graph's ModelGraph's,
    which tfps.estimator sets)."""

    def __init__(self, total=None, every_secs=10.0, printer=print):
        self._total, self._every, self._print = total, every_secs, printer
        self.examples = 0

    def begin(self):
        self._size = self.spec.examples if self.spec is not None else ModelGraph.of().examples
        self.examples = 0

    def after_create_session(self, session, coord):
        self._t0 = self._last = time.time()

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._size) if self._size is not None else None

    def after_run(self, run_context, run_values):
        if run_values.results is None:
            return
        self.examples += int(run_values.results)
        now = time.time()
        if now - self._last >= self._every:
            self._last = now
            self._report(now)

    def end(self, session):
        self._report(time.time())

    def _report(self, now):
        rate = self.examples / max(now - self._t0, 1e-9)
        of = f" of {self._total} examples ({100 * self.examples / self._total:.0f}%)" if self._total else " examples"
        self._print(f"eval: {self.examples}{of}, {rate:.0f} examples/s", flush=True)


class StepStatsHook(tf.compat.v1.train.SessionRunHook):
    """Traces `num_steps` training steps after `after_local_steps` of this task and averages
    their cross-task traffic (rpc_stats: RecvTensor RPCs and bytes per step) and where the
    step's time went (step_phases).

    `stats` is None until the traces are done."""

    def __init__(self, after_local_steps=50, num_steps=5, printer=print):
        self._after, self._n, self._print = after_local_steps, num_steps, printer
        self._local = 0
        self._traces = []
        self._by_task = None
        self.stats = None

    def before_run(self, run_context):
        self._local += 1
        if self.stats is None and self._local > self._after:
            return tf.compat.v1.train.SessionRunArgs(
                None, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                                      output_partition_graphs=True))
        return None

    def after_run(self, run_context, run_values):
        if self.stats is not None or self._local <= self._after or run_values.run_metadata is None:
            return
        try:
            self._traces.append({**rpc_stats(run_values.run_metadata), **(step_phases(run_values.run_metadata) or {})})
            if run_values.run_metadata.partition_graphs:   # the same graphs every step
                self._by_task = messages_by_task(run_values.run_metadata.partition_graphs)
        except Exception as e:   # a monitoring hook never stops training
            self.stats = {}
            self._print(f"StepStatsHook: could not read the step stats ({e!r}); not tracing further", flush=True)
            return
        if len(self._traces) == self._n:
            keys = [k for k in self._traces[0] if all(k in t for t in self._traces)]
            self.stats = {k: round(sum(t[k] for t in self._traces) / self._n, 2 if k.endswith("_ms") else 1)
                          for k in keys}
            if self._by_task is not None:
                self.stats["messages_by_task"] = self._by_task
            sent = f" ({self.stats['messages']:.0f} in the graph)" if "messages" in self.stats else ""
            self._print(f"traffic per step (mean of {self._n} traced steps): {self.stats['recv_tensor_rpcs']:.0f} "
                        f"RecvTensor RPCs{sent}, {self.stats['bytes'] / 2**20:.2f} MiB "
                        f"({self.stats['bytes_to_ps'] / 2**20:.2f} to PS, "
                        f"{self.stats['bytes_from_ps'] / 2**20:.2f} from PS), {self.stats['tasks']:.0f} tasks",
                        flush=True)


class EvictionHook(tf.compat.v1.train.SessionRunHook):
    """Runs the eviction rules (tfps.EmbeddingOptions) of every embedding variable of the graph
    every `every_n_steps` global steps, and logs how many rows went."""

    def __init__(self, every_n_steps, printer=print):
        if not isinstance(every_n_steps, int) or every_n_steps <= 0:
            raise ValueError(f"EvictionHook: every_n_steps must be a positive int, got {every_n_steps!r}")
        self._every, self._print = every_n_steps, printer
        self.evicted = 0
        self.evicted_at = []   # the global steps the rules ran at

    def begin(self):
        from tfps.embedding.variable import embedding_variables
        self._gs = tf.compat.v1.train.get_or_create_global_step()
        evs = [ev for ev in embedding_variables() if ev.options.evicts]
        self._evict = tf.add_n([ev.evict(self._gs) for ev in evs]) if evs else None
        self._last = None

    def before_run(self, run_context):
        # the global step as the run begins, read by the run itself
        return tf.compat.v1.train.SessionRunArgs(self._gs) if self._evict is not None else None

    def after_run(self, run_context, run_values):
        if self._evict is None:
            return
        began = int(run_values.results)
        if began % self._every and (began + 1) % self._every:
            return   # (one trainer) it cannot have ended on a multiple: no run of its own, a round trip in a cluster
        step = run_context.session.run(self._gs)   # as the run ended, like a delta written after it
        if step % self._every == 0 and step != self._last:
            self.evicted_at.append(step)
            self._last = step
            n = run_context.session.run(self._evict)
            self.evicted += int(n)
            self._print(f"step {step} evicted {n} rows", flush=True)
