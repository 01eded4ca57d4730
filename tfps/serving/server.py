"""`tfps serve`: the model stores, the gRPC server (grpcio) and the REST server (Werkzeug), together.

Stopping drains (stop(grace)): new requests are refused at once -- gRPC with UNAVAILABLE from the
server's own handlers while clients keep sending (then grpcio stops, and a connection is refused),
REST with 503 UNAVAILABLE until its socket closes, then the connection is refused --, the requests
the server had begun (their handler entered before the drain) run to their answer, and whatever is
still running at the grace deadline is cut."""
import concurrent.futures
import errno
import gc
import socket
import threading
import time

import grpc
from werkzeug.serving import WSGIRequestHandler, make_server

from tfps.serving.batching import Batcher
from tfps.serving.errors import ServingError
from tfps.serving.grpc_api import add_services
from tfps.serving.models import ModelEntry, Models, check_name
from tfps.serving.rest import RestApp
from tfps.serving.store import ModelStore


def settle_memory():
    """For a process that is a server, called before its first version loads: what the imports
    made is collected once and then frozen out of the cycle collector's sight (gc.freeze), so the
    collection that frees each retired version looks at the objects made since (0.2 s -> 5 ms
    with TensorFlow imported) and a version swap does not stall requests on it."""
    gc.collect()
    gc.freeze()


REFUSE_QUIET_SECS = 0.25   # the stop: no new request refused for this long, and gRPC stops
REFUSE_MAX_SECS = 2.0      # the stop refuses new requests for at most this long before gRPC stops


class _Handler(WSGIRequestHandler):
    timeout = 30   # seconds a connection may stall (a body never finished) before it is dropped


def check_bind(host, ports):
    """The address `host` names (an IPv4 or IPv6 literal, bracketed or not, or a name: the first
    address it resolves to, so that gRPC and REST listen on the same one), checked by
    binding each of `ports` [(what, port)] there once: OSError with the OS's errno and a line
    that says why it cannot be listened on -- the name does not resolve, the address is not one of
    this machine's, or the port is taken."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        infos = socket.getaddrinfo(bare, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(e.errno, f"tfps serve: --host {host!r}: the name does not resolve ({e.strerror})") from None
    family, _, _, _, address = infos[0]
    for what, port in ports:
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as both servers bind
            probe.bind((address[0], port) + tuple(address[2:]))
        except OSError as e:
            why = {errno.EADDRNOTAVAIL: f"{address[0]} is not an address of this machine",
                   errno.EADDRINUSE: f"port {port} is in use there",
                   errno.EACCES: f"port {port} needs privileges"}.get(e.errno, e.strerror)
            raise OSError(e.errno, f"tfps serve: cannot listen on the {what} port {port} of --host {host!r}: "
                                   f"{why}") from None
        finally:
            probe.close()
    return address[0]   # a name: its first address, for both APIs (gRPC alone would take them all)


class InFlight:
    """The requests being handled, for the drain: enter() is refused (UNAVAILABLE) once drain()
    has begun; drain(deadline) waits until those that entered have left, or the deadline."""

    def __init__(self):
        self._cond = threading.Condition()
        self.count, self.draining, self.last_refused = 0, False, None

    def enter(self):
        with self._cond:
            if self.draining:
                self.last_refused = time.monotonic()
                raise ServingError("UNAVAILABLE", "the server is shutting down; retry on another replica")
            self.count += 1

    def quiet(self, secs, deadline):
        """Waits, while draining, until no request has been refused for `secs` (the clients have
        gone elsewhere), or `deadline`."""
        while True:
            with self._cond:
                wake = min(self.last_refused + secs, deadline)
            if time.monotonic() >= wake:
                return
            time.sleep(max(0.0, wake - time.monotonic()))

    def leave(self):
        with self._cond:
            self.count -= 1
            if not self.count:
                self._cond.notify_all()

    def drain(self, deadline):
        """True when no request is left in flight by `deadline` (time.monotonic())."""
        with self._cond:
            if not self.draining:
                self.draining, self.last_refused = True, time.monotonic()   # quiet() counts from here
            while self.count and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return not self.count


class ModelServer:
    """Serves the SavedModel versions under model_base_path as model_name (or several models:
    `models`, a list of tfps.serving.models.ModelEntry, e.g. from read_model_config).

    Args (the CLI's flags): port / rest_api_port (0: any free port; rest_api_port None: no REST),
    host: the address both listen on ("0.0.0.0": every interface, TF Serving's default -- grpcio
    takes it as the IPv4 and IPv6 wildcard;
    "127.0.0.1": this machine only),
    enable_batching with max_batch_size, batch_timeout_micros and num_batch_threads,
    poll_secs (file_system_poll_wait_seconds): how often versions and the followed model_dir are
    looked at, follow: a trainer's model_dir whose checkpoints and deltas the tables follow,
    num_versions: the newest versions kept loaded, max_request_bytes: the largest request body,
    grpc_threads: the gRPC handler threads (None: 16, or with batching max_batch_size + 8 within [16, 256]).
    `follow` needs one model."""

    def __init__(self, model_base_path=None, model_name=None, port=8500, rest_api_port=8501, enable_batching=False,
                 max_batch_size=32, batch_timeout_micros=1000, num_batch_threads=2, poll_secs=1.0, follow=None,
                 num_versions=1, max_request_bytes=64 << 20, grpc_threads=None, session_threads=0, host="0.0.0.0",
                 printer=print, models=None):
        problems = [f"{flag} must be in [0, 65535], got {v}" for flag, v in (("--port", port),
                    ("--rest_api_port", rest_api_port)) if v is not None and not 0 <= v <= 65535]
        problems += [f"--port and --rest_api_port must differ (both {port}): gRPC and REST each listen on their own"] \
            if port and port == rest_api_port else []
        problems += [f"{flag} must be > 0, got {v}" for flag, v in (
            ("--max_batch_size", max_batch_size), ("--max_request_bytes", max_request_bytes),
            ("--num_batch_threads", num_batch_threads)) if v < 1]
        problems += [f"{flag} must be >= 0, got {v}" for flag, v in (
            ("--tensorflow_session_parallelism", session_threads),) if v < 0]
        problems += [f"--grpc_threads must be >= 1, got {grpc_threads}"] if grpc_threads is not None and \
            grpc_threads < 1 else []
        problems += [f"--file_system_poll_wait_seconds must be >= 0 (0: load once), got {poll_secs}"] \
            if poll_secs < 0 else []
        if (models is None) == (model_base_path is None and model_name is None):
            problems += ["give --model_name and --model_base_path, or --model_config_file (models), not both"]
        if models is None:
            problems += [f"--model_name must be a non-empty name without '/' or ':', got {model_name!r}"] \
                if not model_name or "/" in model_name or ":" in model_name else []
            models = [ModelEntry(model_name, model_base_path)]
        elif follow is not None and len(models) != 1:
            problems += ["--follow applies one trainer's model_dir to one model; the config file names "
                         f"{len(models)}"]
        if problems:
            raise ValueError("tfps serve: " + "; ".join(problems))
        for m in models:
            check_name(m.name, "a model name")
        self.models = Models({m.name: ModelStore(m.name, m.base_path, keep=m.num_versions or num_versions,
                                                 follow=follow, threads=session_threads, printer=printer)
                              for m in models})
        self.store = next(iter(self.models.stores.values()))   # the first (with --model_name, the only) model's
        self.in_flight = InFlight()
        self.max_request_bytes = max_request_bytes
        self._poll_secs, self._stop, self._started = poll_secs, threading.Event(), False
        # A request waiting for its batch holds a handler thread: with batching, enough threads for
        # a batch to fill and the next to start gathering; not many more, each thread is another
        # for Python's interpreter lock (132 threads: 1.5x the CPU per request of 40, measured).
        if grpc_threads is None:
            grpc_threads = max(16, min(max_batch_size + 8, 256)) if enable_batching else 16
        # so_reuseport off: a second server on the same port fails instead of sharing its traffic
        self._grpc = grpc.server(concurrent.futures.ThreadPoolExecutor(grpc_threads, thread_name_prefix="tfps-grpc"),
                                 options=[("grpc.max_receive_message_length", max_request_bytes),
                                          ("grpc.max_send_message_length", max_request_bytes),
                                          ("grpc.so_reuseport", 0)])
        add_services(self._grpc, self)
        host = check_bind(host, [("gRPC", port)] + ([("REST", rest_api_port)] if rest_api_port is not None else []))
        try:
            self.port = self._grpc.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            self._grpc.stop(None)
            raise OSError(errno.EADDRINUSE, f"tfps serve: cannot listen on gRPC port {port} of {host} (taken "
                                            f"since it was checked?)")
        try:
            self._rest = make_server(host, rest_api_port, RestApp(self), threaded=True, request_handler=_Handler) \
                if rest_api_port is not None else None
        except OSError as e:
            self._grpc.stop(None)
            raise OSError(e.errno, f"tfps serve: cannot listen on REST port {rest_api_port} of {host}: "
                                   f"{e.strerror or e}") from None
        self.batcher = Batcher(max_batch_size, batch_timeout_micros, num_batch_threads) if enable_batching else None
        if self._rest:
            # stop() waits for the requests in flight (in_flight), not for idle keep-alive connections
            self._rest.daemon_threads = True
            self._rest.block_on_close = False
        self.rest_api_port = self._rest.server_port if self._rest else None
        self._threads = []

    def execute(self, servable, signature, inputs, output_filter):
        if self.batcher is not None:
            return self.batcher.run(servable, signature, inputs, output_filter)
        return servable.run(signature, inputs, output_filter)

    def start(self):
        """Loads what is there now (one poll of each model), then serves and polls in the background."""
        for store in self.models.stores.values():
            store.poll()
        self._grpc.start()
        threads = [threading.Thread(target=store.poll_forever, args=(self._poll_secs, self._stop),
                                    name=f"tfps-serve-poll-{name}", daemon=True)
                   for name, store in self.models.stores.items()] if self._poll_secs > 0 else []
        if self._rest:
            threads.append(threading.Thread(target=self._rest.serve_forever, name="tfps-rest", daemon=True))
        for t in threads:
            t.start()
        self._threads, self._started = threads, True
        return self

    def stop(self, grace=5.0):
        """Drains and stops (the module docstring): returns True when every request begun was
        answered within `grace` seconds, False when some were cut at the deadline."""
        deadline = time.monotonic() + grace
        self._stop.set()
        # gRPC first keeps taking calls and answers the new ones UNAVAILABLE (in_flight refuses
        # them) while those begun finish, until clients stop sending (REFUSE_QUIET_SECS without a
        # new one) or REFUSE_MAX_SECS: grpcio's own stop resets the calls its transport holds but
        # has not handed over yet, which clients see as CANCELLED and do not retry.
        drained = self.in_flight.drain(deadline)
        self.in_flight.quiet(REFUSE_QUIET_SECS, min(deadline, time.monotonic() + REFUSE_MAX_SECS))
        grpc_done = self._grpc.stop(max(0.0, deadline - time.monotonic()))
        if self._rest:
            if self._started:   # shutdown() waits for serve_forever, which only start() runs
                self._rest.shutdown()
            self._rest.server_close()   # the answers are written: the app has returned and its body closed
        drained = grpc_done.wait(max(0.0, deadline - time.monotonic())) and drained
        if self.batcher:
            self.batcher.stop(cut=not drained)
        for t in self._threads:   # the polls (one may be loading a version: not past the deadline)
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        for store in self.models.stores.values():
            store.close()
        return drained
