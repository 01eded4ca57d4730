"""Is a cluster task there? A GetStatus RPC to its TensorFlow gRPC server (over grpcio, which
TensorFlow itself depends on) answers within a timeout when the task is up and not frozen; a
task that is gone refuses the connection, one that is frozen (SIGSTOP, a hung host) lets the
deadline pass.

    watch = PeerWatch({"ps0": "127.0.0.1:2223", "ps1": "127.0.0.1:2224"})
    watch.check()   # -> {"ps1": 12.0}: peers silent since, in seconds
"""
import threading
import time

import grpc

_GET_STATUS = "/tensorflow.WorkerService/GetStatus"   # GetStatusRequest is an empty message


def ping(address, timeout=2.0):
    """True when the TF server at address answers GetStatus within timeout seconds."""
    channel = grpc.insecure_channel(address)
    try:
        call = channel.unary_unary(_GET_STATUS, request_serializer=lambda _: b"",
                                   response_deserializer=lambda raw: raw)
        call(None, timeout=timeout)
        return True
    except grpc.RpcError:
        return False
    finally:
        channel.close()


class PeerWatch:
    """Per peer, how long it has not answered (measured from the last answer, or from the
    watch's start for a peer that never answered)."""

    def __init__(self, peers, rpc_timeout=2.0, clock=time.monotonic):
        self._peers, self._timeout, self._clock = dict(peers), rpc_timeout, clock
        now = clock()
        self._last_answer = {name: now for name in self._peers}

    def check(self):
        """Pings every peer once; returns {name: seconds silent} of those that did not answer."""
        silent = {}
        for name, address in self._peers.items():
            if ping(address, self._timeout):
                self._last_answer[name] = self._clock()
            else:
                silent[name] = self._clock() - self._last_answer[name]
        return silent


def watch_peers(peers, deadline_secs, on_silent, on_deadline, every_secs=5.0):
    """Starts a daemon thread that pings `peers` every `every_secs`: on_silent(name, address,
    seconds) for each silent peer, on_deadline(name, address, seconds) once one has been silent
    for deadline_secs. Returns a threading.Event that stops the watch when set."""
    watch, stop = PeerWatch(peers), threading.Event()

    def loop():
        while not stop.wait(every_secs):
            for name, seconds in watch.check().items():
                if stop.is_set():
                    return
                if seconds >= deadline_secs:
                    on_deadline(name, peers[name], seconds)
                    return
                on_silent(name, peers[name], seconds)
    threading.Thread(target=loop, name="tfps-peer-watch", daemon=True).start()
    return stop
