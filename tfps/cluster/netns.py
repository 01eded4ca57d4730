"""Emulated hosts for `tfps launch --netns` (cluster.netns): every task in a network namespace of
its own with its own address on one bridge, each task's link optionally shaped with tbf
(cluster.emulated_bandwidth_gbit). Linux, root and iproute2 (`ip`, and `tc` for shaping).

For the launcher of pid P, every name is tfps-P-<host>:

    tfps-P-hub     the bridge br0 and one end of each host's link (v-<host>); no address
    tfps-P-<host>  lo and eth0, the link's other end, with address 10.26.x.y/16 (SUBNET); no route out

Everything is made inside these namespaces: nothing in the host's own namespace changes (no
interface, address, route or qdisc), and from a task nothing but the other hosts is reachable.

A keeper process makes the network and removes it (`python -m tfps.cluster.netns keep P`, which
`Network.start` runs with a pipe on its stdin): it builds the plan it reads, answers with the
addresses, moves itself into the hub namespace, then waits for its stdin to close -- the
launcher's exit, whatever ends it, kill -9 included -- and deletes every namespace named
tfps-P-*. A namespace lives on, nameless, while a process runs in it (the tasks die with the
launcher), and its links go with it. Sitting in the hub, the keeper's /proc/<pid>/net/dev holds
every link's counters (`Network.counters`). Namespaces whose launcher is gone (its keeper killed
too) are removed by the next `tfps launch --netns` (`sweep`).

Another process can join a launcher's bridge as a host of its own (a server following the
model, a client): `python -m tfps.cluster.netns join P NAME -- CMD...` makes tfps-P-NAME with a
free address (from the top of SUBNET down), prints {"netns", "address"} on stderr and runs CMD
there; it goes with the launcher's other namespaces.
"""
import argparse
import ctypes
import fcntl
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys

# The C library, opened here once: a forked child calling it before its exec (preexec_fn) must not
# dlopen, whose loader lock another thread of the parent (a C++ unwinder, gRPC) may have held at
# the fork, leaving the child hung before its exec.
LIBC = ctypes.CDLL(None, use_errno=True)

NETNS_DIR = "/run/netns"
SUBNET = ipaddress.ip_network("10.26.0.0/16")   # inside the namespaces only; the host never sees it
PORT = 2222                                      # every host has an address of its own: one port for all
_CLONE_NEWNET = 0x40000000
_NAME = re.compile(r"^[a-z][a-z0-9]{0,10}$")    # v-<name> must fit an interface name (15 characters)


class NetnsError(ValueError):
    """Emulated hosts cannot be made here (no root, no `ip`) or an `ip`/`tc` command failed: the
    message names what and why."""


def netns_name(owner, host):
    return f"tfps-{owner}-{host}"


def check_available(shaping=False):
    """NetnsError unless this process can make namespaces: root, `ip` (and `tc` for shaping)."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/ns/net"):
        raise NetnsError("cluster.netns needs Linux network namespaces, which this system does not have")
    if os.geteuid() != 0:
        raise NetnsError(f"cluster.netns needs root (making network namespaces, links and a bridge needs "
                         f"CAP_NET_ADMIN); this process runs as uid {os.geteuid()}")
    for tool in ("ip", "tc") if shaping else ("ip",):
        if shutil.which(tool) is None:
            why = "cluster.emulated_bandwidth_gbit shapes links with it" if tool == "tc" else "it makes the namespaces"
            raise NetnsError(f"cluster.netns needs the `{tool}` command (iproute2; {why}), which is not on PATH "
                             f"({os.environ.get('PATH', '')})")


def _run(tool, args, lines=None):
    """Runs `tool args` (with lines on stdin for -batch); NetnsError with the command and its words."""
    try:
        out = subprocess.run([tool, *args], input="".join(f"{line}\n" for line in lines) if lines else None,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetnsError(f"`{tool} {' '.join(args)}` could not run: {e}") from None
    if out.returncode != 0:
        shown = f"{tool} {' '.join(args)}" + (f" <<< {'; '.join(lines)}" if lines else "")
        raise NetnsError(f"`{shown[:400]}` failed: {(out.stderr or out.stdout).strip()[:400]}")
    return out.stdout


def _tbf(gbit):
    """tc's arguments of a tbf qdisc at `gbit` Gbit/s: a burst of 1 ms at that rate (at least two
    64 KiB segments, what veth hands over at once), at most 50 ms queued."""
    burst = max(128 << 10, int(gbit * 1e9 / 8 / 1000))
    return ["tbf", "rate", f"{gbit:g}gbit", "burst", str(burst), "latency", "50ms"]


def build(owner, hosts, bandwidth_gbit=None, shaped=None):
    """Makes the hub and a namespace per host; returns {host: address}. `shaped`: the hosts whose
    links tbf shapes to bandwidth_gbit each way (default: all). On an error, what was made is
    removed and NetnsError raised."""
    for host in hosts:
        if not _NAME.match(host) or host == "hub":
            raise NetnsError(f"netns: host name {host!r} must be 1-11 lower-case letters and digits, not 'hub'")
    shaped = set(hosts if shaped is None else shaped) if bandwidth_gbit else set()
    hub = netns_name(owner, "hub")
    addresses = {h: str(SUBNET.network_address + 1 + i) for i, h in enumerate(hosts)}
    try:
        _run("ip", ["-batch", "-"], [f"netns add {netns_name(owner, h)}" for h in ["hub", *hosts]])
        _run("ip", ["-n", hub, "-batch", "-"], ["link set lo up", "link add br0 type bridge",
                                                 "link set br0 addrgenmode none up"] +
             [f"link add v-{h} type veth peer name eth0 netns {netns_name(owner, h)}" for h in hosts] +
             [f"link set v-{h} master br0 addrgenmode none up" for h in hosts])
        for h in hosts:
            _run("ip", ["-n", netns_name(owner, h), "-batch", "-"],
                 ["link set lo up", f"addr add {addresses[h]}/{SUBNET.prefixlen} dev eth0",
                  "link set eth0 addrgenmode none up"])
        if shaped:
            tbf = " ".join(_tbf(bandwidth_gbit))
            _run("tc", ["-n", hub, "-batch", "-"], [f"qdisc add dev v-{h} root {tbf}" for h in hosts if h in shaped])
            for h in [h for h in hosts if h in shaped]:
                _run("tc", ["-n", netns_name(owner, h), "qdisc", "add", "dev", "eth0", "root", *_tbf(bandwidth_gbit)])
    except NetnsError:
        destroy(owner)
        raise
    return addresses


def owned(owner=None):
    """The namespace names tfps-OWNER-* there are (owner None: every tfps-<pid>-* one)."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    pattern = re.compile(rf"^tfps-{owner if owner is not None else '[0-9]+'}-[a-z0-9]+$")
    return sorted(n for n in names if pattern.match(n))


def destroy(owner):
    """Deletes every namespace tfps-OWNER-* (their links go with them); returns those still there."""
    names = owned(owner)
    if names:
        hub = netns_name(owner, "hub")
        order = [n for n in names if n != hub] + [n for n in names if n == hub]
        try:
            _run("ip", ["-force", "-batch", "-"], [f"netns del {n}" for n in order])
        except NetnsError:
            pass   # -force went on past the failures: what is left is returned
    return owned(owner)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep():
    """Removes the namespaces of launchers that are gone (killed together with their keeper);
    returns the names removed."""
    removed = []
    for owner in sorted({int(n.split("-")[1]) for n in owned()}):
        if not _alive(owner):
            before = owned(owner)
            left = destroy(owner)
            removed += [n for n in before if n not in left]
    return removed


def enter(fd):
    """Moves the calling thread into the network namespace open at `fd` (a forked child, a
    process right after its exec, or one thread: sockets it makes then live there)."""
    if LIBC.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into a network namespace: {os.strerror(err)}")


def open_netns(name):
    """A read-only fd of the namespace `name` (for enter)."""
    return os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY | os.O_CLOEXEC)


def _read_counters(pid):
    """{interface: {rx_bytes, rx_packets, tx_bytes, tx_packets}} of the namespace pid runs in."""
    out = {}
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, fields = line.partition(":")
            v = [int(x) for x in fields.split()]
            out[name.strip()] = {"rx_bytes": v[0], "rx_packets": v[1], "tx_bytes": v[8], "tx_packets": v[9]}
    return out


class Network:
    """The emulated hosts of one launcher, made and removed by its keeper process.

        net = Network.start(os.getpid(), ["ps0", "chief0"], bandwidth_gbit=1.0, log=open(...))
        net.addresses["ps0"]           # '10.26.0.1'
        net.fd("ps0")                  # ps0's namespace, for enter() in a forked child
        net.counters()                 # {"ps0": {"bytes_sent", "bytes_received", "packets_sent", ...}}
        net.close()                    # removed (also when this process is killed: the keeper's pipe closes)
    """

    def __init__(self, owner, keeper, addresses):
        self.owner, self._keeper, self.addresses = owner, keeper, addresses
        self._fds = {h: open_netns(netns_name(owner, h)) for h in addresses}

    @classmethod
    def start(cls, owner, hosts, bandwidth_gbit=None, shaped=None, log=None, timeout=60):
        check_available(shaping=bool(bandwidth_gbit))
        keeper = subprocess.Popen([sys.executable, "-m", "tfps.cluster.netns", "keep", str(owner)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log or subprocess.DEVNULL,
                                  text=True, start_new_session=True)   # no terminal's Ctrl-C
        keeper.stdin.write(json.dumps({"hosts": list(hosts), "bandwidth_gbit": bandwidth_gbit,
                                       "shaped": list(hosts if shaped is None else shaped)}) + "\n")
        keeper.stdin.flush()
        ready, _, _ = select.select([keeper.stdout], [], [], timeout)
        line = keeper.stdout.readline() if ready else ""
        answer = json.loads(line) if line.startswith("{") else {
            "error": f"the netns keeper gave no answer in {timeout} s (exit code {keeper.poll()})"}
        if "error" in answer:
            keeper.stdin.close()
            keeper.wait(timeout=60)
            raise NetnsError(answer["error"])
        return cls(owner, keeper, answer["addresses"])

    @property
    def keeper_pid(self):
        return self._keeper.pid

    @property
    def private_fds(self):
        """The fds a forked task must close: the keeper's pipe (its end would keep the network
        up after the launcher's) and the namespaces' (a task needs its own only until it is in)."""
        return [self._keeper.stdin.fileno(), self._keeper.stdout.fileno(), *self._fds.values()]

    def fd(self, host):
        return self._fds[host]

    def netns_of(self, host):
        return netns_name(self.owner, host)

    def counters(self):
        """Per host, its link's counters from the host's side: bytes and packets sent and
        received since the link was made (read at the hub end: what the hub's end receives, the
        host sent). {} once the keeper is gone."""
        try:
            hub = _read_counters(self._keeper.pid)
        except (OSError, ValueError, IndexError):
            return {}
        return {h: {"bytes_sent": c["rx_bytes"], "bytes_received": c["tx_bytes"],
                    "packets_sent": c["rx_packets"], "packets_received": c["tx_packets"]}
                for h in self.addresses for c in [hub.get(f"v-{h}")] if c is not None}

    def close(self, timeout=30):
        """Removes every namespace of the owner (the keeper does, on its stdin's end); returns
        the names still there (none, unless a deletion failed)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        try:
            self._keeper.stdin.close()
        except OSError:
            pass
        try:
            self._keeper.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._keeper.kill()
            self._keeper.wait()
        return destroy(self.owner)   # whatever the keeper could not remove


def join(owner, host):
    """Makes tfps-OWNER-HOST on the bridge of launcher OWNER with a free address, the highest of
    SUBNET not in use (tasks take the lowest); returns (namespace name, address)."""
    check_available()
    if not _NAME.match(host) or host == "hub":
        raise NetnsError(f"netns join: name {host!r} must be 1-11 lower-case letters and digits, not 'hub'")
    hub, ns = netns_name(owner, "hub"), netns_name(owner, host)
    if hub not in owned(owner):
        raise NetnsError(f"netns join: launcher {owner} has no network ({hub} does not exist): is it running "
                         f"with cluster.netns?")
    lock = os.open(os.path.join(NETNS_DIR, hub), os.O_RDONLY)   # (`ip netns` itself locks the directory)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)   # one join at a time picks an address
        if ns in owned(owner):
            raise NetnsError(f"netns join: {ns} exists already; choose another name")
        used = set()
        for other in owned(owner):
            if other != hub:
                for entry in json.loads(_run("ip", ["-n", other, "-j", "-4", "addr", "show"]) or "[]"):
                    used.update(a["local"] for a in entry.get("addr_info", []))
        address = next(str(a) for a in reversed(list(SUBNET.hosts())) if str(a) not in used)
        try:
            _run("ip", ["netns", "add", ns])
            _run("ip", ["-n", hub, "-batch", "-"], [f"link add v-{host} type veth peer name eth0 netns {ns}",
                                                     f"link set v-{host} master br0 addrgenmode none up"])
            _run("ip", ["-n", ns, "-batch", "-"], ["link set lo up", f"addr add {address}/{SUBNET.prefixlen} dev eth0",
                                                    "link set eth0 addrgenmode none up"])
        except NetnsError:
            if ns in owned(owner):
                _run("ip", ["netns", "del", ns])
            raise
    finally:
        os.close(lock)
    return ns, address


def _keep(owner):
    """The keeper: builds the plan read from stdin, answers, then removes everything at stdin's end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # a stop: removes the network as at the pipe's end
    try:
        plan = json.loads(sys.stdin.readline() or "null")
        if plan is None:
            return 0
        try:
            addresses = build(owner, plan["hosts"], plan.get("bandwidth_gbit"), plan.get("shaped"))
            fd = open_netns(netns_name(owner, "hub"))
            enter(fd)   # the hub's links' counters in /proc/<this pid>/net/dev
            os.close(fd)
            answer = {"addresses": addresses}
        except (NetnsError, OSError) as e:
            answer = {"error": str(e)}
        print(json.dumps(answer), flush=True)
        if "error" not in answer:
            while sys.stdin.read(1 << 16):
                pass
    finally:
        left = destroy(owner)
        if left:
            print(f"tfps netns keeper: could not remove {', '.join(left)} (`ip netns del NAME` removes one)",
                  file=sys.stderr, flush=True)
    return 1 if left else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfps.cluster.netns", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    keep = sub.add_parser("keep", help="(tfps launch's) make the network read from stdin; remove it at stdin's end")
    keep.add_argument("owner", type=int)
    jn = sub.add_parser("join", help="run CMD in a new namespace on launcher OWNER's bridge")
    jn.add_argument("owner", type=int, help="the pid of `tfps launch` (its namespaces are tfps-OWNER-*)")
    jn.add_argument("name", help="this host's name: 1-11 lower-case letters and digits")
    jn.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sub.add_parser("sweep", help="remove the namespaces of launchers that are gone")
    args = parser.parse_args(argv)
    if args.cmd == "keep":
        return _keep(args.owner)
    if args.cmd == "sweep":
        print(json.dumps({"removed": sweep()}))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("join needs a command after --")
    try:
        ns, address = join(args.owner, args.name)
    except NetnsError as e:
        print(f"tfps: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"netns": ns, "address": address}), file=sys.stderr, flush=True)
    fd = open_netns(ns)
    enter(fd)
    os.close(fd)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
