"""`tfps serve`: the model store, the gRPC server (grpcio) and the REST server (Werkzeug), together."""
import concurrent.futures
import threading

import grpc
from werkzeug.serving import WSGIRequestHandler, make_server

from tfps.serving.batching import Batcher
from tfps.serving.grpc_api import add_services
from tfps.serving.rest import RestApp
from tfps.serving.store import ModelStore


class _Handler(WSGIRequestHandler):
    timeout = 30   # seconds a connection may stall (a body never finished) before it is dropped


class ModelServer:
    """Serves the SavedModel versions under model_base_path as model_name.

    Args (the CLI's flags): port / rest_api_port (0: any free port; rest_api_port None: no REST),
    enable_batching with max_batch_size, batch_timeout_micros and num_batch_threads,
    poll_secs (file_system_poll_wait_seconds): how often versions and the followed model_dir are
    looked at, follow: a trainer's model_dir whose checkpoints and deltas the tables follow,
    num_versions: the newest versions kept loaded, max_request_bytes: the largest request body."""

    def __init__(self, model_base_path, model_name, port=8500, rest_api_port=8501, enable_batching=False,
                 max_batch_size=32, batch_timeout_micros=1000, num_batch_threads=2, poll_secs=1.0, follow=None,
                 num_versions=1, max_request_bytes=64 << 20, grpc_threads=16, session_threads=0, host="0.0.0.0",
                 printer=print):
        problems = [f"{flag} must be in [0, 65535], got {v}" for flag, v in (("--port", port),
                    ("--rest_api_port", rest_api_port)) if v is not None and not 0 <= v <= 65535]
        problems += [f"{flag} must be > 0, got {v}" for flag, v in (
            ("--max_batch_size", max_batch_size), ("--max_request_bytes", max_request_bytes),
            ("--num_batch_threads", num_batch_threads)) if v < 1]
        problems += [f"--file_system_poll_wait_seconds must be >= 0 (0: load once), got {poll_secs}"] \
            if poll_secs < 0 else []
        problems += [f"--model_name must be a non-empty name without '/' or ':', got {model_name!r}"] \
            if not model_name or "/" in model_name or ":" in model_name else []
        if problems:
            raise ValueError("tfps serve: " + "; ".join(problems))
        self.store = ModelStore(model_name, model_base_path, keep=num_versions, follow=follow,
                                threads=session_threads, printer=printer)
        self.max_request_bytes = max_request_bytes
        self._poll_secs, self._stop, self._started = poll_secs, threading.Event(), False
        # so_reuseport off: a second server on the same port fails instead of sharing its traffic
        self._grpc = grpc.server(concurrent.futures.ThreadPoolExecutor(grpc_threads, thread_name_prefix="tfps-grpc"),
                                 options=[("grpc.max_receive_message_length", max_request_bytes),
                                          ("grpc.max_send_message_length", max_request_bytes),
                                          ("grpc.so_reuseport", 0)])
        add_services(self._grpc, self)
        try:
            self.port = self._grpc.add_insecure_port(f"{host}:{port}")
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            self._grpc.stop(None)
            raise OSError(f"tfps serve: cannot listen on gRPC port {port} (in use?)")
        try:
            self._rest = make_server(host, rest_api_port, RestApp(self), threaded=True, request_handler=_Handler) \
                if rest_api_port is not None else None
        except OSError:
            self._grpc.stop(None)
            raise
        self.batcher = Batcher(max_batch_size, batch_timeout_micros, num_batch_threads) if enable_batching else None
        if self._rest:
            self._rest.daemon_threads = False   # stop() waits for the requests in flight
        self.rest_api_port = self._rest.server_port if self._rest else None
        self._threads = []

    def execute(self, servable, signature, inputs, output_filter):
        if self.batcher is not None:
            return self.batcher.run(servable, signature, inputs, output_filter)
        return servable.run(signature, inputs, output_filter)

    def start(self):
        """Loads what is there now (one poll), then serves and polls in the background."""
        self.store.poll()
        self._grpc.start()
        threads = [threading.Thread(target=self.store.poll_forever, args=(self._poll_secs, self._stop),
                                    name="tfps-serve-poll", daemon=True)] if self._poll_secs > 0 else []
        if self._rest:
            threads.append(threading.Thread(target=self._rest.serve_forever, name="tfps-rest", daemon=True))
        for t in threads:
            t.start()
        self._threads, self._started = threads, True
        return self

    def stop(self, grace=5.0):
        self._stop.set()
        if self._rest:
            if self._started:   # shutdown() waits for serve_forever, which only start() runs
                self._rest.shutdown()
            self._rest.server_close()   # joins the requests in flight (each bounded by the handler's timeout)
        self._grpc.stop(grace).wait()
        if self.batcher:
            self.batcher.stop()
        for t in self._threads:
            t.join(timeout=30)
        self.store.close()
