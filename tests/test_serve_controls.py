"""tfps serve's controls (--host: test_serve_host.py): SIGTERM drains under load
(--grace_secs), a stop that never ends is ended past it, and the batcher's stop
(--model_config_file: test_serve_models.py). Oracles: each export loaded on its own
(score_saved_model), the kernel's table of listening sockets (/proc/net/tcp), a connection that
is refused, and every answer of a load run."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf

from tfps.serving.config import ServeConfig

from serve_client import _request, _stub
from test_serving import score_saved_model

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve_runner")]


def _listening(port):
    """The local addresses of the sockets listening on TCP `port` ("127.0.0.1", "0.0.0.0", "::"...;
    an IPv4-mapped IPv6 address as its IPv4 address)."""
    out = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state != "0A" or int(hex_port, 16) != port:   # 0A: LISTEN
                    continue
                raw = bytes.fromhex(address)
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                address = socket.inet_ntop(socket.AF_INET if width == 4 else socket.AF_INET6, raw)
                out.add(address.removeprefix("::ffff:"))   # an IPv4 address on an IPv6 socket (grpcio's)
    return out


def _free_port():
    """A TCP port free now, below the ephemeral range (the CLI's --rest_api_port 0 means no REST
    API, as in TF Serving; a port 0 had chosen was once taken by another test's connection
    before the server bound it)."""
    from tfps.cluster.ports import free_ports
    return free_ports(1)[0]


def _serve(forker, tmp_path, *args):
    """`tfps serve` on port 0 and a free REST port, a fork with TensorFlow imported
    (tests/forker.py): the run and its ready line."""
    proc = forker.start(["serve", "--port", "0", "--rest_api_port", str(_free_port()), *args],
                        tmp_path / "serve.out", tmp_path / "serve.err")
    try:
        line = proc.first_line(timeout=120)
    except AssertionError:
        proc.kill()
        raise
    if not line:
        proc.wait(60)
        pytest.fail(f"tfps serve exited {proc.returncode}: {proc.errors()[-3000:]}")
    return proc, json.loads(line)


def _server_read(port, at_least):
    """Whether a connection to the server's `port` delivered at least `at_least` bytes to it and
    the server read every one (the kernel's count, as `ss -i` shows it: bytes_received, Recv-Q 0)."""
    out = subprocess.run(["ss", "-Htin", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, timeout=30).stdout
    connections, head = [], None
    for line in out.splitlines():
        if line and not line[0].isspace():
            head = line
        elif head is not None:
            connections.append((int(head.split()[0]), line))
            head = None
    for recv_q, info in connections:
        received = re.search(r"\bbytes_received:(\d+)", info)
        if recv_q == 0 and received and int(received.group(1)) >= at_least:
            return True
    return False


def _wait(condition, what, timeout=120, alive=None):
    """Waits (polling every 10 ms) until condition() holds; AssertionError naming `what` after
    `timeout` s, or at once when alive() turns false."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert alive is None or alive(), f"gone while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_sigterm_drains_under_load(runner, tmp_path, forker):
    """Two gRPC and two REST clients send without pause; requests are merged by a batcher that
    waits 4 s for a batch to fill, so at SIGTERM each client has a request the server has begun.
    What counts: a request sent at least 1 s before SIGTERM has been begun by the server and must
    be answered with Predict's scores; one sent later may instead be refused -- gRPC UNAVAILABLE,
    REST 503 or a refused or reset connection, all of which a client retries -- and nothing may
    end any other way. The server exits 0, within --grace_secs, with the default host's sockets
    on every interface. The REST clients retry this server to the end (503, then the connection
    refused); a gRPC client goes to another replica at its first refusal, as one behind a load
    balancer does: one that goes on retrying this server past the refusal window (2 s at most)
    can meet grpcio's own stop, which resets a call its transport holds (CANCELLED), as
    docs/serving.md says."""
    rows = {k: v[:1] for k, v in runner["rows"].items()}
    want = score_saved_model(runner["exports"][20], rows)
    grace = 60.0
    proc, ready = _serve(forker, tmp_path, "--model_base_path", os.path.dirname(runner["exports"][20]),
                         "--model_name", "demo",
                         "--enable_batching", "--max_batch_size", "64", "--batch_timeout_micros", "4000000",
                         "--grace_secs", str(grace))
    results = []    # (client, sent, answered, outcome, value)
    in_flight = {}  # client -> when its request now unanswered was sent
    lock, gone = threading.Lock(), threading.Event()

    def grpc_client(i):
        stub = _stub(ready["grpc_port"])
        while not gone.is_set():
            sent = time.monotonic()
            with lock:
                in_flight[f"grpc{i}"] = sent
            try:
                got = stub.Predict(_request(rows), timeout=120)
                outcome, value = "ok", tf.make_ndarray(got.outputs["probabilities"])
            except grpc.RpcError as e:
                outcome, value = ("refused" if e.code() == grpc.StatusCode.UNAVAILABLE else "failed"), e.code()
            with lock:
                results.append((f"grpc{i}", sent, time.monotonic(), outcome, value))
                del in_flight[f"grpc{i}"]
            if outcome != "ok":
                return   # refused: to another replica (or failed: the assertion below says so)

    def rest_client(i):
        body = json.dumps({"inputs": {k: v.tolist() for k, v in rows.items()}}).encode()
        while not gone.is_set():
            sent = time.monotonic()
            with lock:
                in_flight[f"rest{i}"] = sent
            req = urllib.request.Request(f"http://127.0.0.1:{ready['rest_api_port']}/v1/models/demo:predict",
                                         data=body, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    outcome, value = "ok", np.array(json.loads(r.read())["outputs"]["probabilities"], np.float32)
            except urllib.error.HTTPError as e:
                outcome, value = ("refused" if e.code == 503 else "failed"), e.code
            except urllib.error.URLError as e:
                refused = isinstance(e.reason, (ConnectionRefusedError, ConnectionResetError))
                outcome, value = ("refused" if refused else "failed"), repr(e.reason)
            except ConnectionResetError as e:   # http.client.RemoteDisconnected: reset before any answer
                outcome, value = "refused", repr(e)
            with lock:
                results.append((f"rest{i}", sent, time.monotonic(), outcome, value))
                del in_flight[f"rest{i}"]
            if outcome != "ok":
                time.sleep(0.05)

    clients = [threading.Thread(target=grpc_client, args=(i,)) for i in range(2)] + \
        [threading.Thread(target=rest_client, args=(i,)) for i in range(2)]
    try:
        # the default host: every interface (grpcio takes 0.0.0.0 as the IPv4 and IPv6 wildcard)
        assert _listening(ready["grpc_port"]) in ({"0.0.0.0"}, {"::"}), _listening(ready["grpc_port"])
        assert _listening(ready["rest_api_port"]) == {"0.0.0.0"}
        for t in clients:
            t.start()

        def answered():
            with lock:
                return [r for r in results if r[3] == "ok"]
        deadline = time.monotonic() + 120
        while len({r[0] for r in answered()}) < 4 or len(answered()) < 8:   # two batches at least
            assert time.monotonic() < deadline and proc.poll() is None, results[-5:]
            time.sleep(0.05)
        batch_done = max(r[2] for r in answered())

        def begun():   # a request of the batch after batch_done, unanswered for a second: the server has it
            with lock:
                return any(batch_done <= t < time.monotonic() - 1.0 for t in in_flight.values())
        _wait(begun, "a request in flight for a second", alive=lambda: proc.poll() is None)
        term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace + 60)
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
        gone.set()
        for t in clients:
            if t.ident is not None:
                t.join(timeout=180)
    err = proc.errors()
    assert proc.returncode == 0, err[-3000:]
    assert exited - term < grace
    failed = [r for r in results if r[3] == "failed"]
    assert not failed, failed[:5]
    early = [r for r in results if r[1] < term - 1.0]
    assert early and all(r[3] == "ok" for r in early), [r for r in early if r[3] != "ok"][:5]
    # requests the server had begun when SIGTERM came were answered after it (at their batch's
    # timeout, about 2 s later)
    assert any(r[1] < term - 1.0 and r[2] > term for r in early), sorted(r[:3] for r in early)[-8:]
    for r in results:
        if r[3] == "ok":
            np.testing.assert_allclose(r[4], want, rtol=1e-5, atol=1e-6)


def test_sigterm_cuts_what_runs_past_the_grace_and_exits_1(runner, tmp_path, forker):
    """A request that would run 60 s (its batch waits that long to fill) is cut at --grace_secs 1:
    the server exits 1, long before the request would have ended, and the client gets an error."""
    rows = {k: v[:1] for k, v in runner["rows"].items()}
    proc, ready = _serve(forker, tmp_path, "--model_base_path", os.path.dirname(runner["exports"][20]),
                         "--model_name", "demo",
                         "--enable_batching", "--max_batch_size", "64", "--batch_timeout_micros", "60000000",
                         "--grace_secs", "1")
    outcome = []
    # a REST request written whole by this test, so that the bytes the server must read are known
    body = json.dumps({"inputs": {k: v.tolist() for k, v in rows.items()}}).encode()
    request = (f"POST /v1/models/demo:predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

    def client():
        reply = b""
        try:
            with socket.create_connection(("127.0.0.1", ready["rest_api_port"]), timeout=120) as s:
                s.sendall(request)
                while True:
                    chunk = s.recv(1 << 16)
                    if not chunk:
                        break
                    reply += chunk
        except OSError as e:   # reset: the server went without answering
            outcome.append(repr(e))
            return
        outcome.append(reply.split(b"\r\n", 1)[0].decode() if reply else "closed without an answer")
    t = threading.Thread(target=client)
    try:
        t.start()
        # the server has read the whole request: it waits in its batch
        _wait(lambda: _server_read(ready["rest_api_port"], len(request)), "the server to read the request",
              alive=lambda: proc.poll() is None)
        term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
        t.join(timeout=120)
    assert proc.returncode == 1, proc.errors()[-3000:]
    # the grace (1 s) and the exit, not the batch's 60 s: a bound 30x the grace, half the batch's wait
    assert exited - term < 60 / 2
    assert outcome and not re.match(r"HTTP/\d\.\d 200\b", outcome[0]), outcome


_HANGING_STOP = """
import sys, threading
import tfps.serving.server
tfps.serving.server.ModelServer.stop = lambda self, grace=5.0: threading.Event().wait()   # a stop that never ends
from tfps.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_stop_that_never_ends_dumps_every_thread_and_exits_1(runner, tmp_path):
    """If the drain itself hangs, the server does not: STOP_MARGIN_SECS past --grace_secs it
    writes its threads' stacks to stderr and exits 1 (a new interpreter whose ModelServer.stop
    never returns). Oracle: the exit code and the time it took against the stop's bound."""
    from tfps.serving.run import STOP_MARGIN_SECS
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _HANGING_STOP, "serve", "--port", "0", "--rest_api_port", "0",
                                 "--model_base_path", os.path.dirname(runner["exports"][20]), "--model_name", "demo",
                                 "--grace_secs", "0"], stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert json.loads(proc.stdout.readline())["grpc_port"] > 0
        term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        took = time.monotonic() - term
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, (tmp_path / "err").read_text()[-3000:]
    assert STOP_MARGIN_SECS <= took < 5 * STOP_MARGIN_SECS, took   # the watchdog's, at most 5x it


def test_sigterm_to_any_of_the_servers_threads_stops_it(runner, tmp_path, forker):
    """The kernel hands a process's SIGTERM to any thread that does not block it, here to one of
    the server's gRPC or TensorFlow threads (tgkill), not the main thread: the server still stops,
    drained (exit 0), at once (an untimed wait in the main thread never ran Python's handler: the
    server ran on)."""
    import ctypes
    proc, ready = _serve(forker, tmp_path, "--model_base_path", os.path.dirname(runner["exports"][20]),
                         "--model_name", "demo")
    try:
        assert ready["grpc_port"] > 0
        others = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid)
        assert others, "the server has no thread but its main one"
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.tgkill(proc.pid, others[-1], signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, proc.errors()[-3000:]


class _Doubling:
    """A servable whose one signature doubles "x" (batchable along dimension 0); counts its runs."""
    name = "double"

    def __init__(self):
        self.runs = 0

    def batchable(self):
        return True

    def run(self, signature, inputs, output_filter=None):
        self.runs += 1
        return {"y": inputs["x"] * 2}


@pytest.mark.parametrize("cut", [False, True])
def test_a_stopped_batcher_runs_or_cuts_the_requests_still_waiting(cut):
    """A request waiting for a batch that would close in 60 s: stop() runs it at once (numpy's
    double of its input); stop(cut=True) -- the drain's deadline has passed -- answers UNAVAILABLE
    and never runs it."""
    from tfps.serving.batching import Batcher
    from tfps.serving.errors import ServingError
    servable = _Doubling()
    batcher = Batcher(max_batch_size=64, timeout_micros=60_000_000, threads=1)
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    outcome = []

    def client():
        try:
            outcome.append(batcher.run(servable, servable, {"x": x}))
        except ServingError as e:
            outcome.append(e)
    t = threading.Thread(target=client)
    t.start()
    deadline = time.monotonic() + 30
    while not batcher.requests and time.monotonic() < deadline:   # the request is in its batch
        time.sleep(0.01)
    assert batcher.requests == 1
    start = time.monotonic()
    batcher.stop(cut=cut)
    t.join(timeout=30)
    assert not t.is_alive() and time.monotonic() - start < 30
    if cut:
        assert isinstance(outcome[0], ServingError) and outcome[0].code == "UNAVAILABLE", outcome
        assert servable.runs == 0
    else:
        np.testing.assert_array_equal(outcome[0]["y"], x * 2)
        assert servable.runs == 1


def test_the_batcher_under_concurrent_requests_answers_each_its_own_rows():
    """24 threads, 2 batch threads, two kinds of request (different inner shapes: never merged),
    1-3 rows each, batches of at most 8 rows: each answer is numpy's double of its own input,
    and requests were merged (fewer runs than requests)."""
    from tfps.serving.batching import Batcher
    servable = _Doubling()
    batcher = Batcher(max_batch_size=8, timeout_micros=2000, threads=2)
    errors = []

    def client(seed):
        rng = np.random.default_rng(seed)
        for _ in range(40):
            x = rng.standard_normal((int(rng.integers(1, 4)), 1 + seed % 2)).astype(np.float32)
            out = batcher.run(servable, servable, {"x": x})
            if not np.array_equal(out["y"], x * 2):
                errors.append((seed, x, out))
    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    batcher.stop()
    assert not any(t.is_alive() for t in threads)
    assert not errors and batcher.requests == 24 * 40
    assert batcher.runs < batcher.requests / 2, (batcher.runs, batcher.requests)


def test_a_stop_under_load_answers_unavailable_never_cancelled(runner):
    """Four clients send Predict back to back through a stop, 20 times: every call is answered
    with the scores or refused with UNAVAILABLE (retried elsewhere by any client); none ends
    CANCELLED (which grpcio's own stop gives a call its transport holds and clients do not
    retry) or any other way. A client goes elsewhere after its first refusal, as one behind a
    load balancer does."""
    from tfps.serving.server import ModelServer
    rows = {k: v[:1] for k, v in runner["rows"].items()}
    want = score_saved_model(runner["exports"][20], rows)
    outcomes = []
    for _ in range(20):
        server = ModelServer(ServeConfig(os.path.dirname(runner["exports"][20]), "demo", port=0, rest_api_port=None,
                                         host="127.0.0.1"), printer=lambda *a, **k: None).start()
        answered = threading.Semaphore(0)

        def client(codes):
            stub = _stub(server.port)
            while True:
                try:
                    got = stub.Predict(_request(rows), timeout=60)
                    np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), want, rtol=1e-5,
                                               atol=1e-6)
                    codes.append(grpc.StatusCode.OK)
                    answered.release()
                except grpc.RpcError as e:
                    codes.append(e.code())
                    return
        runs = [[] for _ in range(4)]
        threads = [threading.Thread(target=client, args=(codes,)) for codes in runs]
        for t in threads:
            t.start()
        for _ in range(8):   # the clients are sending: a stop now comes between and during calls
            assert answered.acquire(timeout=60)
        assert server.stop(grace=30)
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        outcomes += runs
    ends = [codes[-1] for codes in outcomes]
    assert set(ends) == {grpc.StatusCode.UNAVAILABLE}, ends
    assert all(set(codes[:-1]) <= {grpc.StatusCode.OK} for codes in outcomes)
