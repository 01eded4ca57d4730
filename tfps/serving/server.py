"""`tfps serve`: the model store, the gRPC server (grpcio) and the REST server (Werkzeug), together."""
import concurrent.futures
import threading

import grpc
from werkzeug.serving import make_server

from tfps.serving.batching import Batcher
from tfps.serving.grpc_api import add_services
from tfps.serving.rest import RestApp
from tfps.serving.store import ModelStore, poll_forever


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
        self.store = ModelStore(model_name, model_base_path, keep=num_versions, follow=follow,
                                threads=session_threads, printer=printer)
        self.batcher = Batcher(max_batch_size, batch_timeout_micros, num_batch_threads) if enable_batching else None
        self.max_request_bytes = max_request_bytes
        self._poll_secs, self._stop = poll_secs, threading.Event()
        self._grpc = grpc.server(concurrent.futures.ThreadPoolExecutor(grpc_threads, thread_name_prefix="tfps-grpc"),
                                 options=[("grpc.max_receive_message_length", max_request_bytes),
                                          ("grpc.max_send_message_length", max_request_bytes)])
        add_services(self._grpc, self)
        self.port = self._grpc.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"tfps serve: cannot listen on gRPC port {port}")
        self._rest = make_server(host, rest_api_port, RestApp(self), threaded=True) \
            if rest_api_port is not None else None
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
        threads = [threading.Thread(target=poll_forever, args=(self.store, self._poll_secs, self._stop),
                                    name="tfps-serve-poll", daemon=True)]
        if self._rest:
            threads.append(threading.Thread(target=self._rest.serve_forever, name="tfps-rest", daemon=True))
        for t in threads:
            t.start()
        self._threads = threads
        return self

    def stop(self, grace=5.0):
        self._stop.set()
        if self._rest:
            self._rest.shutdown()
        self._grpc.stop(grace).wait()
        if self.batcher:
            self.batcher.stop()
        for t in self._threads:
            t.join(timeout=30)
        self.store.close()
