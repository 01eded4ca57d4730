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
from tfps.serving.models import Models
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
    """Serves the models of a ServeConfig (tfps.serving.config): their SavedModel versions over TF
    Serving's gRPC API and its REST API, on config.host."""

    def __init__(self, config, printer=print):
        config.checked()
        self.config = config
        self.models = Models({m.name: ModelStore(m.name, m.base_path, keep=m.num_versions or config.num_versions,
                                                 follow=config.follow, threads=config.session_threads,
                                                 printer=printer)
                              for m in config.entries()})
        self.store = next(iter(self.models.stores.values()))   # the first (with --model_name, the only) model's
        self.in_flight = InFlight()
        self.max_request_bytes = max_request_bytes = config.max_request_bytes
        self._poll_secs, self._stop, self._started = config.poll_secs, threading.Event(), False
        # so_reuseport off: a second server on the same port fails instead of sharing its traffic
        self._grpc = grpc.server(concurrent.futures.ThreadPoolExecutor(config.grpc_handler_threads(),
                                                                       thread_name_prefix="tfps-grpc"),
                                 options=[("grpc.max_receive_message_length", max_request_bytes),
                                          ("grpc.max_send_message_length", max_request_bytes),
                                          ("grpc.so_reuseport", 0)])
        add_services(self._grpc, self)
        port, rest_api_port = config.port, config.rest_api_port
        host = check_bind(config.host, [("gRPC", port)] + ([("REST", rest_api_port)] if rest_api_port is not None
                                                            else []))
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
        self.batcher = Batcher(config.max_batch_size, config.batch_timeout_micros, config.num_batch_threads) \
            if config.enable_batching else None
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
