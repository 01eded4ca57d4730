"""One loaded SavedModel version: its session, signatures, checked inputs and in-flight count."""
import contextlib
import os
import threading

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from tfps.ops import _loader
from tfps.serving.errors import ServingError, error_line
from tfps.state import manifest as manifests

DEFAULT_SIGNATURE = "serving_default"
EXAMPLE_METHODS = ("tensorflow/serving/classify", "tensorflow/serving/regress")   # signatures over Examples


class Signature:
    """A signature's inputs and outputs: {alias: (tensor name, dtype, shape as a list, None unknown)}."""

    def __init__(self, name, signature_def):
        self.name, self.proto = name, signature_def
        self.inputs = {k: _tensor_info(v) for k, v in signature_def.inputs.items()}
        self.outputs = {k: _tensor_info(v) for k, v in signature_def.outputs.items()}
        self.enums = {k: dtype.as_datatype_enum for k, (_, dtype, _) in self.inputs.items()}   # the wire's dtypes

    def check(self, inputs):
        """inputs {alias: array-like} -> {alias: np.ndarray of the signature's dtype}, or
        ServingError(INVALID_ARGUMENT) naming the input that is missing, unknown, of another
        dtype or shape."""
        missing = sorted(set(self.inputs) - set(inputs))
        unknown = sorted(set(inputs) - set(self.inputs))
        if missing or unknown:
            raise ServingError("INVALID_ARGUMENT", f"signature {self.name!r} takes inputs {sorted(self.inputs)}; "
                               + (f"missing {missing}" if missing else "") + ("; " if missing and unknown else "")
                               + (f"unknown {unknown}" if unknown else ""))
        out = {}
        for alias, value in inputs.items():
            _, dtype, shape = self.inputs[alias]
            array = _as_array(alias, value, dtype)
            if shape is not None and (array.ndim != len(shape) or
                                      any(d is not None and d != n for d, n in zip(shape, array.shape))):
                raise ServingError("INVALID_ARGUMENT", f"input {alias!r} has shape {list(array.shape)}; the "
                                   f"signature expects {[-1 if d is None else d for d in shape]} (-1: any)")
            out[alias] = array
        rows = {a.shape[0] if a.ndim else None for a in out.values()}
        if len(rows) > 1:
            raise ServingError("INVALID_ARGUMENT", f"inputs disagree on the batch size (dimension 0): "
                               f"{ {k: (v.shape[0] if v.ndim else None) for k, v in out.items()} }")
        return out

    def batchable(self):
        """Whether every input and output has an unknown dimension 0 (merging requests is exact)."""
        infos = list(self.inputs.values()) + list(self.outputs.values())
        return all(shape is not None and shape and shape[0] is None for _, _, shape in infos)


def _tensor_info(info):
    shape = None if info.tensor_shape.unknown_rank else [d.size if d.size >= 0 else None
                                                         for d in info.tensor_shape.dim]
    return info.name, tf.dtypes.as_dtype(info.dtype), shape


def _as_array(alias, value, dtype):
    if dtype == tf.string:
        array = np.asarray(value, dtype=object)
        flat = array.reshape(-1)
        if not all(isinstance(v, (bytes, str)) for v in flat):
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r} must be strings")
        return np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(array) \
            if array.size else array
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):   # ragged lists
        array = np.asarray(None, dtype=object)
    if array.dtype == object:
        raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is ragged or not numeric; the signature expects "
                           f"a {dtype.name} tensor")
    want = np.dtype(dtype.as_numpy_dtype)
    if array.size == 0:   # an empty JSON list has no type of its own (numpy makes it float64)
        return array.astype(want)
    if array.dtype.kind in "USV":
        raise ServingError("INVALID_ARGUMENT", f"input {alias!r} holds strings; the signature expects {dtype.name}")
    if array.dtype.kind == "u" and array.size and want.kind == "i" and array.max() > np.iinfo(want).max:
        raise ServingError("INVALID_ARGUMENT", f"input {alias!r} holds integers above {np.iinfo(want).max}, out of "
                           f"{dtype.name}'s range")
    if array.dtype != want:
        same_kind = (np.issubdtype(array.dtype, np.integer) and np.issubdtype(want, np.integer)) or \
            (np.issubdtype(want, np.floating) and (np.issubdtype(array.dtype, np.integer) or
                                                   np.issubdtype(array.dtype, np.floating))) or \
            (array.dtype == np.bool_ and want == np.bool_)
        if not same_kind or (array.size and np.issubdtype(want, np.integer) and
                             (array.min() < np.iinfo(want).min or array.max() > np.iinfo(want).max)):
            raise ServingError("INVALID_ARGUMENT", f"input {alias!r} is {array.dtype}; the signature expects "
                               f"{dtype.name}")
        array = array.astype(want)
    return array


def read_export_manifest(path):
    """The manifest of the SavedModel at `path` (assets.extra/tfps_manifest.json: fingerprint, the
    model's description, step), or None for an export without one."""
    file = os.path.join(path, "assets.extra", manifests.EXPORT_MANIFEST)
    if not os.path.exists(file):
        return None
    with open(file) as f:
        out = manifests.parse(f.read(), file)
    if not isinstance(out.get("step"), int):
        raise manifests.StateMismatch(f"{file} names no step")
    return out


def session_config(threads):
    """The ConfigProto of a served version's session. threads > 0 (--tensorflow_session_parallelism):
    TensorFlow's inter-op and intra-op pools of that many threads. 0 (the default): each run
    executes in the thread that calls it (inter-op -1: the gRPC or REST handler, or a batch
    thread), its kernels on one thread, with no pool thread spinning for work: the requests in
    flight are the parallelism (a large single request runs on one core; N > 0 for those). A
    batch-1 Predict on the demo model took 1,050-1,160 us of server CPU with TensorFlow's pools
    (their hand-offs and spinning) and 640-700 us so, in a probe (docs/serving.md). TensorFlow
    sizes its pools once per process, at the first session: the intra-op and spinning settings
    hold in `tfps serve`, not in a process that made a session before."""
    if threads > 0:
        return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=-1)
    config.experimental.disable_thread_spinning = True
    return config


class Servable:
    """A SavedModel version loaded in its own graph and session.

    run() is thread-safe. acquire()/release() count the requests in flight: retire() closes the
    session once the last of them is done, so a request that found this version finishes on it."""

    def __init__(self, path, version, threads=0):
        self.path, self.version = path, int(version)
        _loader.load()   # the ops the SavedModel's graph holds
        self.manifest = read_export_manifest(path)
        # The step of the model's state it serves: the export's, then what --follow applied.
        self.state_step = self.manifest["step"] if self.manifest else None
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph, config=session_config(threads))
        try:
            meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], path)
            self.signatures = {k: Signature(k, v) for k, v in meta.signature_def.items()
                               if k != "__saved_model_init_op"}
        except Exception:
            self.session.close()
            raise
        self._lock = threading.Lock()
        self._callables = {}   # (signature, inputs, outputs) -> session callable
        self._rw = threading.Condition()
        self._readers = self._writers_waiting = 0
        self._writing = False
        self._in_flight, self._retired, self._closed = 0, False, False

    def state(self):
        """{fingerprint, step} of the model state served (the export's, moved on by --follow), or
        {} for an export without a manifest."""
        if self.manifest is None:
            return {}
        return {"fingerprint": self.manifest["fingerprint"], "step": self.state_step}

    def signature(self, name):
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise ServingError("INVALID_ARGUMENT", f"serving signature {name!r} not found; version {self.version} "
                               f"has {sorted(self.signatures)}")
        return self.signatures[name]

    def run(self, signature, inputs, output_filter=None):
        """{alias: checked array} -> {alias: np.ndarray} of the outputs (all, or output_filter's)."""
        names = sorted(set(output_filter or signature.outputs))
        unknown = [n for n in names if n not in signature.outputs]
        if unknown:
            raise ServingError("INVALID_ARGUMENT", f"output_filter names {unknown}; signature {signature.name!r} "
                               f"has outputs {sorted(signature.outputs)}")
        aliases = sorted(inputs)
        key = (signature.name, tuple(aliases), tuple(names))
        run = self._callables.get(key)
        if run is None:
            run = self._callables[key] = self._make_callable([signature.inputs[a][0] for a in aliases],
                                                             [signature.outputs[n][0] for n in names])
        try:
            with self.reading():
                values = run(*[inputs[a] for a in aliases])
        except tf.errors.InvalidArgumentError as e:
            raise ServingError("INVALID_ARGUMENT", error_line(e)) from None
        except tf.errors.ResourceExhaustedError as e:
            raise ServingError("RESOURCE_EXHAUSTED", error_line(e)) from None
        return dict(zip(names, values))

    def _make_callable(self, feeds, fetches):
        """A callable of the session (TF_SessionMakeCallable: feeds and fetches resolved once, each
        call goes straight to the executor). Session.make_callable with a feed list is not one:
        it calls Session.run, which re-resolves the feeds and fetches and re-checks the graph on
        every call (6% of the server's CPU a request, measured). Its arguments: arrays of the
        feeds' dtypes, in the feeds' order."""
        unique = list(dict.fromkeys(feeds))   # two aliases of one tensor: fed once (as feed_dict did)
        options = config_pb2.CallableOptions(feed=unique, fetch=fetches)
        run = self.session._make_callable_from_options(options)   # noqa: SLF001 -- the C API's callable
        if len(unique) == len(feeds):
            return run
        first = [feeds.index(name) for name in unique]
        return lambda *values: run(*[values[i] for i in first])

    # -- requests vs table updates ---------------------------------------------------------------
    @contextlib.contextmanager
    def reading(self):
        """Held by each run: any number at once, never during writing()."""
        with self._rw:
            while self._writing or self._writers_waiting:
                self._rw.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._rw:
                self._readers -= 1
                if not self._readers:
                    self._rw.notify_all()

    @contextlib.contextmanager
    def writing(self):
        """Held while --follow applies a checkpoint or delta: requests see it all or none of it.
        Waiting writers go first, so a steady load cannot starve an update."""
        with self._rw:
            self._writers_waiting += 1
            while self._writing or self._readers:
                self._rw.wait()
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._rw:
                self._writing = False
                self._rw.notify_all()

    def warm_up(self):
        """Runs every signature once on one row of zeros (the first run of a graph builds its
        kernels), so the first real request after a swap is not the slow one; a signature over
        serialized Examples (classify, regress) on none (an empty Example lacks the features)."""
        for signature in self.signatures.values():
            if signature.proto.method_name in EXAMPLE_METHODS:
                self.run(signature, {alias: np.zeros([0], dtype=object) for alias in signature.inputs})
                continue
            feed = {}
            for alias, (_, dtype, shape) in signature.inputs.items():
                dims = [1 if d is None else d for d in (shape or [1])]
                feed[alias] = np.zeros(dims, dtype=object if dtype == tf.string else dtype.as_numpy_dtype)
                if dtype == tf.string:
                    feed[alias][...] = b""
            self.run(signature, feed)

    # -- lifetime --------------------------------------------------------------------------------
    @property
    def closed(self):
        """Retired and its session closing or closed (no request in flight)."""
        return self._closed

    @property
    def retired(self):
        return self._retired

    def acquire(self):
        with self._lock:
            if self._closed:
                return False
            self._in_flight += 1
            return True

    def release(self):
        with self._lock:
            self._in_flight -= 1
            close = self._retired and self._in_flight == 0 and not self._closed
            self._closed = self._closed or close
        if close:
            self.session.close()

    def retire(self):
        """No new request will find this version: close it once those in flight are done."""
        with self._lock:
            self._retired = True
            close = self._in_flight == 0 and not self._closed
            self._closed = self._closed or close
        if close:
            self.session.close()
