"""The floor under `tfps serve`: the same grpcio server (thread pool and options as
tfps.serving.server.ModelServer's) with a PredictionService whose Predict answers a response
made once, as large as the demo model's (probabilities and logits, [1] float32 each). What a request costs here is
gRPC and protobuf alone. Prints {"grpc_port": port} and serves until SIGTERM.

Usage: python benchmarks/serving_echo.py [--threads 16]"""
import argparse
import concurrent.futures
import json
import signal
import threading

import grpc
import numpy as np
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tfps.serving import tensors


class Echo(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self):
        self.response = predict_pb2.PredictResponse()
        self.response.model_spec.name = "demo"
        self.response.model_spec.version.value = 1
        for name in ("probabilities", "logits"):
            tensors.fill(self.response.outputs[name], np.zeros([1], np.float32))

    def Predict(self, request, context):   # noqa: N802
        return self.response


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(args.threads), options=[("grpc.so_reuseport", 0)])
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(json.dumps({"grpc_port": port}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop(0)


if __name__ == "__main__":
    main()
