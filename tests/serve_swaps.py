"""Run by test_serve in a process of its own (its RSS is the server's): `swaps` new versions of
one export dropped into the base path one after the other while client threads send Predict
requests, each new version loaded, warmed and swapped in, the one before it retired and its
directory removed. Prints one JSON line: RSS after each swap, requests, failures and answers that
differ from the expected scores.

    python tests/serve_swaps.py [--batching] EXPORT ROWS.npz WANT.npy BASE SWAPS [FOLLOW_MODEL_DIR]"""
import json
import os
import shutil
import sys
import threading
import time

import grpc
import numpy as np
import tensorflow as tf

from serve_client import _request, _stub
from tfps.serving.config import ServeConfig
from tfps.serving.server import ModelServer, settle_memory


def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def main(export, rows_path, want_path, base, swaps, follow=None, batching=False):
    rows, want = dict(np.load(rows_path)), np.load(want_path)
    first = int(os.path.basename(export))
    shutil.copytree(export, os.path.join(base, str(first)))
    settle_memory()   # as `tfps serve` does
    server = ModelServer(ServeConfig(base, "demo", port=0, rest_api_port=None, host="127.0.0.1", poll_secs=0.05,
                                     follow=follow, enable_batching=batching, max_batch_size=8,
                                     batch_timeout_micros=1000), printer=lambda *a, **k: None).start()
    stop, lock = threading.Event(), threading.Lock()
    seen = {"requests": 0, "failures": [], "wrong": 0, "versions": set()}

    def load():
        stub = _stub(server.port)
        while not stop.is_set():
            try:
                got = stub.Predict(_request(rows), timeout=60)
                ok = np.allclose(tf.make_ndarray(got.outputs["probabilities"]), want, rtol=1e-5, atol=1e-6)
                with lock:
                    seen["requests"] += 1
                    seen["wrong"] += not ok
                    seen["versions"].add(got.model_spec.version.value)
            except grpc.RpcError as e:
                with lock:
                    seen["failures"].append(f"{e.code()}: {e.details()}")
            time.sleep(0.01)   # a steady stream (up to 100 requests a second a thread), leaving the loads CPU
    threads = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    rss, started = [], time.time()
    try:
        for i in range(1, swaps + 1):
            version = first + i
            incoming = os.path.join(base, ".incoming")
            shutil.copytree(export, incoming)
            os.rename(incoming, os.path.join(base, str(version)))
            deadline = time.time() + 120
            while list(server.store.loaded()) != [version]:
                if time.time() > deadline:
                    raise TimeoutError(f"version {version} not swapped in after 120 s: serving "
                                       f"{list(server.store.loaded())}")
                time.sleep(0.01)
            shutil.rmtree(os.path.join(base, str(version - 1)))
            rss.append(rss_kib())
    finally:
        stop.set()
        for t in threads:
            t.join()
        server.stop()
    print(json.dumps({"rss_kib": rss, "seconds": time.time() - started, "requests": seen["requests"],
                      "failed": len(seen["failures"]), "failures": seen["failures"][:5], "wrong": seen["wrong"],
                      "versions": len(seen["versions"]), "swaps": server.store.swaps}))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--batching"]
    main(args[0], args[1], args[2], args[3], int(args[4]), *args[5:6], batching="--batching" in sys.argv[1:])
