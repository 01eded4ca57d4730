"""Emulated hosts (tfps.cluster.netns).

Oracles: the configured rate and a link's counters at its two ends; `ip netns` and the host's
links afterwards. Needs root and iproute2 (skipped, with the reason, elsewhere)."""
import json
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

from tfps.cluster import netns

CAN = os.geteuid() == 0 and shutil.which("ip") and shutil.which("tc") and os.path.exists("/proc/self/ns/net")
needs_netns = pytest.mark.skipif(not CAN, reason="emulated hosts need root and iproute2 (ip, tc)")


def _in_netns(path, fn):
    """fn() on a thread of its own moved into the network namespace at `path` (its sockets live
    there); its result."""
    out = {}

    def run():
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                netns.enter(fd)
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- raised again in the caller
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _host_links():
    return sorted(link["ifname"] for link in json.loads(subprocess.run(["ip", "-j", "link", "show"], check=True,
                                                                      capture_output=True, text=True).stdout))


def _transfer(src, dst, address, nbytes):
    """Bits per second of nbytes sent from namespace src to a server at address in dst."""
    server = _in_netns(dst, lambda: socket.create_server((address, 0)))
    received = []

    def serve():
        conn, _ = server.accept()
        n = 0
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break
            n += len(data)
        received.append(n)
        conn.sendall(b"k")
        conn.close()
    t = threading.Thread(target=serve)
    t.start()

    def send():
        with socket.create_connection(server.getsockname()[:2]) as c:
            started = time.perf_counter()
            c.sendall(b"x" * nbytes)
            c.shutdown(socket.SHUT_WR)
            assert c.recv(1) == b"k"
            return time.perf_counter() - started
    seconds = _in_netns(src, send)
    t.join()
    server.close()
    assert received == [nbytes]
    return nbytes * 8 / seconds


@pytest.mark.slow
@needs_netns
def test_hosts_get_addresses_links_shaped_to_the_rate_and_go_with_the_keeper():
    owner, gbit, payload = os.getpid(), 0.2, 8 << 20
    links_before = _host_links()
    net = netns.Network.start(owner, ["a", "b", "c", "d"], bandwidth_gbit=gbit, shaped=["a", "b"])
    try:
        path = {h: f"{netns.NETNS_DIR}/{netns.netns_name(owner, h)}" for h in net.addresses}
        assert len(set(net.addresses.values())) == 4
        assert all(ipaddr in netns.SUBNET for ipaddr in map(__import__("ipaddress").ip_address, net.addresses.values()))
        shaped = _transfer(path["a"], path["b"], net.addresses["b"], payload)
        free = _transfer(path["c"], path["d"], net.addresses["d"], payload)
        assert 0.5 * gbit * 1e9 <= shaped <= 1.1 * gbit * 1e9, shaped
        assert free > 2 * gbit * 1e9, free
        c = net.counters()   # one link's two ends: what a sent, b received (plus a few small frames)
        assert payload <= c["a"]["bytes_sent"] and payload <= c["b"]["bytes_received"]
        assert abs(c["a"]["bytes_sent"] - c["b"]["bytes_received"]) < 0.01 * payload
        # Another process joins the bridge as a host of its own, reachable from the others.
        ns, address = netns.join(owner, "extra")
        assert address not in net.addresses.values()
        _transfer(f"{netns.NETNS_DIR}/{ns}", path["d"], net.addresses["d"], 1 << 20)
        assert _host_links() == links_before   # nothing was made in the host's own namespace
    finally:
        left = net.close()
    assert left == [] and netns.owned(owner) == []
    # The namespaces of a launcher that is gone (its keeper too) go at the next launch's sweep.
    dead = subprocess.Popen(["true"])
    dead.wait()
    subprocess.run(["ip", "netns", "add", netns.netns_name(dead.pid, "hub")], check=True)
    assert netns.netns_name(dead.pid, "hub") in netns.sweep()
    assert netns.owned(dead.pid) == []
