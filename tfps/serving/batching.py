"""Server-side batching: concurrent requests for one version and signature become one session run.

A request waits until its batch holds max_batch_size rows or its first request has waited
batch_timeout_micros, whichever comes first; the batch's inputs are concatenated along
dimension 0, run once, and each output is split back by the requests' row counts. Requests with
more rows than max_batch_size, and signatures whose inputs or outputs have a fixed dimension 0,
run on their own."""
import threading
import time

import numpy as np

from tfps.serving.errors import ServingError


class _Item:
    __slots__ = ("inputs", "rows", "done", "result", "error")

    def __init__(self, inputs, rows):
        self.inputs, self.rows = inputs, rows
        self.done, self.result, self.error = threading.Event(), None, None


class _Batch:
    __slots__ = ("servable", "signature", "output_filter", "items", "rows", "deadline")

    def __init__(self, servable, signature, output_filter, deadline):
        self.servable, self.signature, self.output_filter = servable, signature, output_filter
        self.items, self.rows, self.deadline = [], 0, deadline


def _single(batch, item):
    alone = _Batch(batch.servable, batch.signature, batch.output_filter, 0.0)
    alone.items, alone.rows = [item], item.rows
    return alone


class Batcher:
    """Args: max_batch_size rows per run; timeout_micros the longest a request waits for others;
    threads: batches run at once (each on its own thread)."""

    def __init__(self, max_batch_size, timeout_micros, threads=2):
        if max_batch_size < 1 or timeout_micros < 0 or threads < 1:
            raise ValueError(f"batching: max_batch_size >= 1, batch_timeout_micros >= 0 and num_batch_threads >= 1 "
                             f"needed, got {max_batch_size}, {timeout_micros}, {threads}")
        self.max_rows, self.timeout = max_batch_size, timeout_micros / 1e6
        self._cond = threading.Condition()
        self._open = {}            # key -> _Batch still taking requests
        self._ready = []           # full batches, in the order they filled
        self._stopped = False
        self.runs = self.requests = 0
        self._threads = [threading.Thread(target=self._loop, name=f"tfps-batch-{i}", daemon=True)
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def run(self, servable, signature, inputs, output_filter=None):
        """Like servable.run, on a batch shared with concurrent requests."""
        rows = {a.shape[0] for a in inputs.values() if a.ndim}
        if len(rows) != 1 or not signature.batchable() or next(iter(rows)) > self.max_rows:
            return servable.run(signature, inputs, output_filter)
        item = _Item(inputs, rows.pop())
        key = (id(servable), signature.name, tuple(sorted(set(output_filter or ()))),
               tuple((k, v.dtype.str, v.shape[1:]) for k, v in sorted(inputs.items())))
        with self._cond:
            if self._stopped:
                raise ServingError("UNAVAILABLE", "the server is shutting down")
            batch = self._open.get(key)
            if batch is not None and batch.rows + item.rows > self.max_rows:
                self._ready.append(self._open.pop(key))   # no room: it goes now
                batch = None
            # A batch thread is woken only when there is something new to time or run (a batch
            # opened, or one ready), not for each request that joins an open batch.
            wake = batch is None
            if batch is None:
                batch = self._open[key] = _Batch(servable, signature, output_filter, time.monotonic() + self.timeout)
            batch.items.append(item)
            batch.rows += item.rows
            if batch.rows >= self.max_rows:
                self._ready.append(self._open.pop(key))
                wake = True
            self.requests += 1
            if wake:
                self._cond.notify()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.result

    def _next(self):
        """The batch to run now (removed from the open ones), or None once stopped. A thread that
        takes a batch while others are open or ready wakes another to time or run them."""
        with self._cond:
            while True:
                batch = None
                if self._ready:
                    batch = self._ready.pop(0)
                else:
                    now = time.monotonic()
                    due = [k for k, b in self._open.items() if b.deadline <= now]
                    if due:
                        batch = self._open.pop(min(due, key=lambda k: self._open[k].deadline))
                if batch is not None:
                    if self._ready or self._open:
                        self._cond.notify()
                    return batch
                if self._stopped:   # what is still open runs now: no request is left waiting
                    return self._open.pop(next(iter(self._open))) if self._open else None
                waits = [b.deadline - now for b in self._open.values()]
                self._cond.wait(min(waits) if waits else None)

    def _loop(self):
        while True:
            batch = self._next()
            if batch is None:
                return
            self._execute(batch)
            batch = None   # while this thread waits, it holds no version (a retired one is freed)

    def _execute(self, batch):
        items = batch.items
        try:
            if len(items) == 1:
                results = [batch.servable.run(batch.signature, items[0].inputs, batch.output_filter)]
            else:
                merged = {k: np.concatenate([it.inputs[k] for it in items]) for k in items[0].inputs}
                try:
                    out = batch.servable.run(batch.signature, merged, batch.output_filter)
                except ServingError:   # one request's values: each gets its own answer or error
                    for it in items:
                        self._execute(_single(batch, it))
                    return
                total = sum(it.rows for it in items)
                bad = [k for k, v in out.items() if not v.ndim or v.shape[0] != total]
                if bad:
                    raise ServingError("INTERNAL", f"batching: outputs {bad} do not have one row per input row")
                cuts = np.cumsum([it.rows for it in items])[:-1]
                split = {k: np.split(v, cuts) for k, v in out.items()}
                results = [{k: parts[i] for k, parts in split.items()} for i in range(len(items))]
            with self._cond:
                self.runs += 1
            for it, result in zip(items, results):
                it.result = result
        except Exception as e:   # noqa: BLE001  (each request of the batch gets the error)
            for it in items:
                it.error = e
        for it in items:
            it.done.set()

    def stop(self, cut=False):
        """Stops the batch threads. The requests still waiting in a batch run now, or, with `cut`
        (the drain's grace deadline has passed), get UNAVAILABLE without running: an answer after
        the deadline would race the gRPC server's own cut of the same request."""
        with self._cond:
            self._stopped = True
            if cut:
                waiting = self._ready + list(self._open.values())
                self._ready, self._open = [], {}
                for batch in waiting:
                    for it in batch.items:
                        it.error = ServingError("UNAVAILABLE", "the server stopped: this request was still "
                                                "waiting for its batch at the --grace_secs deadline")
                        it.done.set()
            self._cond.notify_all()
        for t in self._threads:   # with cut, past the deadline: a run in progress is not waited for
            t.join(timeout=0 if cut else 10)
