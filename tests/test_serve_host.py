"""tfps serve's --host: the gRPC and REST sockets listen where it says (loopback only, IPv6
loopback bracketed or not, a name on what it resolves to), and an address it cannot listen on
is told by the OS's own error. Oracles: the kernel's tables of listening sockets
(/proc/net/tcp, tcp6), a connection that is refused, and each export's scores loaded on its own."""
import json
import os
import signal
import socket
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf

from tfps.serving.config import ServeConfig

from serve_client import _request
from test_serve_controls import _free_port, _listening, _serve
from test_serve_models import _check_two_models, _config
from test_serving import score_saved_model

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serve_runner")]


def _outside_address():
    """An address of this machine that is not loopback (the one its default route leaves by), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.254.254.254", 9))   # UDP: picks the route, sends nothing
        address = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def _refused(host, port):
    try:
        socket.create_connection((host, port), timeout=10).close()
        return False
    except ConnectionRefusedError:
        return True


def test_host_loopback_listens_on_loopback_only_for_grpc_and_rest(runner, tmp_path, forker):
    proc, ready = _serve(forker, tmp_path, "--model_config_file", _config(tmp_path, runner["exports"]),
                         "--host", "127.0.0.1")
    try:
        assert ready["models"] == {name: [int(os.path.basename(runner["exports"][s]))]
                                   for name, s in (("early", 20), ("late", 40))}
        for port in (ready["grpc_port"], ready["rest_api_port"]):
            assert _listening(port) == {"127.0.0.1"}, (port, _listening(port))
            outside = _outside_address()
            if outside is not None:
                assert _refused(outside, port)
            assert not _refused("127.0.0.1", port)
        _check_two_models(ready["grpc_port"], ready["rest_api_port"], runner)
    finally:
        proc.send_signal(signal.SIGTERM)
        if proc.wait(120) is None:
            proc.kill()
    assert proc.returncode == 0, proc.errors()[-3000:]


@pytest.mark.parametrize("host", ["::1", "[::1]", "localhost"])
def test_host_takes_ipv6_bracketed_or_not_and_names(runner, host):
    """--host ::1 (as it is, or bracketed) listens on IPv6 loopback for gRPC and REST, and a name
    on what it resolves to; the scores are the export's."""
    from tfps.serving.server import ModelServer
    rows = {k: v[:1] for k, v in runner["rows"].items()}
    want = score_saved_model(runner["exports"][20], rows)
    server = ModelServer(ServeConfig(os.path.dirname(runner["exports"][20]), "demo", port=0, rest_api_port=0, host=host),
                         printer=lambda *a, **k: None).start()
    try:
        target = "[::1]" if "::1" in host else host
        with grpc.insecure_channel(f"{target}:{server.port}") as channel:
            from tensorflow_serving.apis import prediction_service_pb2_grpc
            got = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(_request(rows), timeout=60)
        np.testing.assert_allclose(tf.make_ndarray(got.outputs["probabilities"]), want, rtol=1e-5, atol=1e-6)
        body = json.dumps({"inputs": {k: v.tolist() for k, v in rows.items()}}).encode()
        req = urllib.request.Request(f"http://{target}:{server.rest_api_port}/v1/models/demo:predict", data=body,
                                     method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            rest = np.array(json.loads(r.read())["outputs"]["probabilities"], np.float32)
        np.testing.assert_allclose(rest, want, rtol=1e-5, atol=1e-6)
        if "::1" in host:
            assert _listening6(server.port) == {"::1"}
    finally:
        server.stop(grace=5)


def _listening6(port):
    """The IPv6 addresses listening on TCP `port` (/proc/net/tcp6)."""
    import ipaddress
    out = set()
    with open("/proc/net/tcp6") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                words = [address[i:i + 8] for i in range(0, 32, 8)]
                raw = b"".join(bytes.fromhex(w)[::-1] for w in words)
                out.add(str(ipaddress.IPv6Address(raw)))
    return out


@pytest.mark.parametrize("host,error", [("192.0.2.99", 99), ("no.such.host.invalid", -2)])
def test_a_host_that_cannot_be_listened_on_says_why(runner, host, error):
    """An address not on this machine (EADDRNOTAVAIL) and a name that does not resolve
    (EAI_NONAME) are told apart from a port in use (EADDRINUSE), by the OS's own error."""
    import errno
    from tfps.serving.server import ModelServer
    base = os.path.dirname(runner["exports"][20])
    with pytest.raises(OSError) as e:
        ModelServer(ServeConfig(base, "demo", port=0, rest_api_port=0, host=host), printer=lambda *a, **k: None)
    assert e.value.errno == (errno.EADDRNOTAVAIL if error == 99 else socket.EAI_NONAME)
    port = _free_port()
    with pytest.raises(ValueError):   # one port for both APIs: refused before either binds
        ModelServer(ServeConfig(base, "demo", port=port, rest_api_port=port, host="127.0.0.1"),
                    printer=lambda *a, **k: None)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(OSError) as e:
            ModelServer(ServeConfig(base, "demo", port=taken.getsockname()[1], rest_api_port=0, host="127.0.0.1"),
                        printer=lambda *a, **k: None)
        assert e.value.errno == errno.EADDRINUSE
    finally:
        taken.close()
