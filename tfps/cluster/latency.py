"""A TCP relay that delays each direction by a set time: emulated network latency for
benchmarks on a kernel without netem (`cluster.emulated_latency_ms`, `tfps launch` puts one in
front of every PS address).

    relay = LatencyRelay(("127.0.0.1", 7001), ("127.0.0.1", 7000), delay_ms=2.0)  # 7001 -> 7000
    relay.start(); ...; relay.stop()
    python -m tfps.cluster.latency --delay-ms 2 7001=127.0.0.1:7000 [7003=127.0.0.1:7002 ...]

Each accepted connection gets a connection to the target and, per direction, a reader thread
that stamps every chunk it receives with `now + delay` and a writer thread that sends it at that
time (time.sleep: ~0.1 ms precision, unlike an event loop's 1 ms timers). Order is kept,
bandwidth is not limited, and a chunk is never held longer than the delay after it arrived.
"""
import argparse
import collections
import socket
import sys
import threading
import time

CHUNK = 1 << 20


class _Direction:
    """src -> dst, each chunk sent `delay` seconds after it was read."""

    def __init__(self, src, dst, delay):
        self._src, self._dst, self._delay = src, dst, delay
        self._queue = collections.deque()
        self._ready = threading.Condition()
        self.threads = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._write, daemon=True)]

    def _read(self):
        while True:
            try:
                data = self._src.recv(CHUNK)
            except OSError:
                data = b""
            with self._ready:
                self._queue.append((time.perf_counter() + self._delay, data))
                self._ready.notify()
            if not data:
                return

    def _write(self):
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                due, data = self._queue.popleft()
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:
                    self._dst.shutdown(socket.SHUT_WR)
                    return
                self._dst.sendall(data)
            except OSError:
                return


class LatencyRelay:
    """Listens on `listen` (host, port) and relays every connection to `target` (host, port),
    each direction delayed by delay_ms."""

    def __init__(self, listen, target, delay_ms):
        if delay_ms < 0:
            raise ValueError(f"LatencyRelay: delay_ms must be >= 0, got {delay_ms}")
        self.target, self.delay = target, delay_ms / 1000.0
        self._server = socket.create_server(listen, reuse_port=False)
        self.address = self._server.getsockname()[:2]
        self._stopped = False

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while not self._stopped:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for d in (_Direction(client, upstream, self.delay), _Direction(upstream, client, self.delay)):
                for t in d.threads:
                    t.start()

    def stop(self):
        self._stopped = True
        self._server.close()


def _address(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv=None):
    parser = argparse.ArgumentParser(description="TCP relays that delay each direction (emulated latency)")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay in milliseconds")
    parser.add_argument("--host", default="127.0.0.1", help="address the relays listen on")
    parser.add_argument("routes", nargs="+", metavar="PORT=HOST:PORT", help="listen port = target address")
    args = parser.parse_args(argv)
    relays = []
    for route in args.routes:
        port, target = route.split("=", 1)
        relays.append(LatencyRelay((args.host, int(port)), _address(target), args.delay_ms).start())
    print(f"relaying {', '.join(args.routes)} with {args.delay_ms:g} ms each way", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
