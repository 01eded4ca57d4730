"""Addresses for a local cluster: free ports below the kernel's ephemeral range, and the
ClusterSpec dict of a job on them."""
import errno
import random
import socket

_LOWEST_PORT = 10000   # the ports picked lie in [10000, the ephemeral range's start)


def _ephemeral_start():
    """The first port of the kernel's ephemeral range (what port 0 and outgoing connections get)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_ports(n, host="127.0.0.1"):
    """n distinct ports free on host right now (bound then released). They come from below the
    kernel's ephemeral range when it leaves room: a port from that range can be taken by any
    process's outgoing connection between this pick and the task's own bind (seen in the suite:
    'Address already in use'). At most 64 tries a port. ValueError naming the host when it cannot
    be bound here."""
    if n <= 0:
        return []
    start = _ephemeral_start()
    room = start is not None and start - _LOWEST_PORT >= 64 * n
    # random ports below the range (a repeat is skipped), else the kernel's choice
    candidates = [random.randrange(_LOWEST_PORT, start) if room else 0 for _ in range(64 * n)]
    ports = []
    for port in candidates:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host, port))
            if s.getsockname()[1] not in ports:
                ports.append(s.getsockname()[1])
        except OSError as e:
            if port and e.errno == errno.EADDRINUSE:
                continue
            raise ValueError(f"launch: cluster.host {host!r} cannot be used for the cluster's addresses: "
                             f"{e.strerror or e}") from None
        finally:
            s.close()
        if len(ports) == n:
            return ports
    raise ValueError(f"launch: no {n} distinct free ports on {host!r}" + (f" below {start}" if room else ""))


def cluster_spec(num_ps, num_workers, host="127.0.0.1"):
    """{"chief": [..], "worker": [..], "ps": [..]} on free ports; worker count includes the chief."""
    ports = free_ports(num_ps + num_workers, host)
    spec = {"chief": [f"{host}:{ports[0]}"], "ps": [f"{host}:{p}" for p in ports[1:1 + num_ps]]}
    if num_workers > 1:
        spec["worker"] = [f"{host}:{p}" for p in ports[1 + num_ps:]]
    return spec
