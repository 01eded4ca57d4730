"""Memory caps per task for `tfps launch` (cluster.memory_cap_mib), as a cluster manager gives
them: each capped task in a memory cgroup of its own. Linux, root, and a writable memory
controller: cgroup v2 where the unified hierarchy offers it, else cgroup v1's memory hierarchy.

For the launcher of pid P, at the root of the hierarchy's mount:

    v2  /sys/fs/cgroup/tfps-P-S-N/<task>          memory.max = the cap, memory.swap.max = 0,
                                                  memory.oom.group = 1
    v1  /sys/fs/cgroup/memory/tfps-P-S-N/<task>   memory.limit_in_bytes = the cap, and
                                                  memory.memsw.limit_in_bytes too where swap is accounted

(the parent itself has no cap; on v2 it passes the memory controller down). The parent's name is
its owner record: P the launcher's pid, S its start time (/proc/P/stat, clock ticks since boot)
and N its pid namespace (the inode of /proc/self/ns/pid), so that a launcher of the same pid in
another pid namespace (a container sharing the hierarchy) or later (a reused pid) has a group of
its own. A cgroup directory cannot hold a file of ours, hence the name; the hierarchy belongs to
one kernel, so no host name is needed. A task joins its group
itself (`join`) before it runs anything: a forked one right after the fork, an exec'd one right
after the exec (tfps.cluster.process). A restarted task goes back into the same group. A process
over its cap is killed by the kernel (SIGKILL), and the group's counter says so (`oom_kills`:
v2's memory.events, v1's memory.oom_control, kernel 4.13+). The groups are removed when the
launcher ends (`TaskGroups.close`, which kills only in the groups it made); those of launchers
that are gone (kill -9) are removed by the next launch (`sweep`): only when the record says the
owner is dead and no process is in any of its groups, and nothing is killed.
"""
import dataclasses
import errno
import os
import re
import signal
import sys
import time

from tfps.cluster.netns import _alive

MOUNTINFO = "/proc/self/mountinfo"
_OWNED = re.compile(r"^tfps-([0-9]+)-([0-9]+)-([0-9]+)$")   # tfps-PID-START-PIDNS


class CgroupError(ValueError):
    """Memory caps cannot be had here (not Linux, not root, no writable memory controller), or a
    cgroup could not be made: the message names what and why."""


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup hierarchy with the memory controller: version 2 (unified) or 1."""
    version: int
    mount: str
    read_only: bool = False

    def __str__(self):
        return f"cgroup v{self.version} at {self.mount}"


def _unescape(path):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)   # mountinfo's \040 for a space


def _mounts(mountinfo):
    """(mount point, fs type, mount options, super options) of each cgroup mount."""
    out = []
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 6 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                out.append((_unescape(fields[4]), rest[0], fields[5].split(","), rest[2].split(",")))
    return out


def _words(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def find(mountinfo=None):
    """The hierarchy caps go in: the unified one (v2) when its root offers the memory controller,
    else v1's memory hierarchy. CgroupError when neither is mounted."""
    mountinfo = mountinfo or MOUNTINFO
    try:
        mounts = _mounts(mountinfo)
    except OSError as e:
        raise CgroupError(f"cluster.memory_cap_mib: cannot read {mountinfo} ({e.strerror})") from None
    for point, fstype, options, _ in mounts:
        if fstype == "cgroup2" and "memory" in _words(os.path.join(point, "cgroup.controllers")):
            return Hierarchy(2, point, "ro" in options)
    for point, fstype, options, super_options in mounts:
        if fstype == "cgroup" and "memory" in super_options:
            return Hierarchy(1, point, "ro" in options)
    raise CgroupError("cluster.memory_cap_mib needs the memory cgroup controller, and no cgroup hierarchy mounted "
                      "here has it (neither cgroup v2 with memory in its cgroup.controllers nor a cgroup v1 memory "
                      "hierarchy in /proc/self/mountinfo)")


def check_available(mountinfo=None):
    """The Hierarchy caps go in, or CgroupError: not Linux, not root, no memory controller, or
    its hierarchy not writable."""
    if not sys.platform.startswith("linux"):
        raise CgroupError("cluster.memory_cap_mib needs Linux cgroups, which this system does not have")
    if os.geteuid() != 0:
        raise CgroupError(f"cluster.memory_cap_mib needs root (the launcher makes a memory cgroup per task and "
                          f"moves the task into it); this process runs as uid {os.geteuid()}")
    hierarchy = find(mountinfo)
    if hierarchy.read_only or not os.access(hierarchy.mount, os.W_OK):
        raise CgroupError(f"cluster.memory_cap_mib: the memory controller's hierarchy ({hierarchy}) is not "
                          f"writable here{' (mounted read-only)' if hierarchy.read_only else ''}")
    return hierarchy


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _enable_memory(group, hierarchy):
    """v2: the memory controller for group's children (cgroup.subtree_control)."""
    control = os.path.join(group, "cgroup.subtree_control")
    if "memory" in _words(control):
        return
    try:
        _write(control, "+memory")
    except OSError as e:
        # v2's "no internal processes" rule: a group with processes of its own cannot pass a
        # controller to its children (EBUSY); the real root is exempt, but the root of a container's
        # cgroup namespace is not, and it usually holds the container's processes, this launcher's
        # among them. (Not tested here: this machine's hierarchy is v1.)
        if e.errno != errno.EBUSY:
            raise
        raise CgroupError(f"cluster.memory_cap_mib: cannot enable the memory controller for the groups below "
                          f"{group} ({hierarchy}): writing +memory to {control} was refused (EBUSY): cgroup v2 "
                          f"refuses it in a group that holds processes of its own (they are in "
                          f"{os.path.join(group, 'cgroup.procs')}; in a container this is its cgroup root, which "
                          f"holds this launcher). Move those processes into a child group first (e.g. mkdir "
                          f"{group}/init and write each pid to {group}/init/cgroup.procs), or run the launcher "
                          f"where its cgroup is delegated to it (a container whose init does that, a systemd unit "
                          f"with Delegate=yes)") from None


def _start_time(pid):
    """The process's start time (clock ticks since boot: /proc/PID/stat's 22nd field), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_namespace():
    """The inode of this process's pid namespace, or None."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def owner_name(pid=None):
    """The name of the parent group of launcher pid (this process when None): tfps-PID-START-PIDNS,
    or tfps-PID-r<random> when its start time or pid namespace cannot be read (a group no sweep
    will judge, hence remove)."""
    pid = os.getpid() if pid is None else pid
    start, namespace = _start_time(pid), _pid_namespace()
    if start is None or namespace is None:
        return f"tfps-{pid}-r{os.urandom(6).hex()}"
    return f"tfps-{pid}-{start}-{namespace}"


def _owner_gone(name):
    """Whether the launcher that made the parent group `name` is dead by the name's record: of this
    pid namespace, and its pid gone or now another process's (started at another time). False
    when that cannot be judged (another pid namespace, another naming, /proc unreadable)."""
    m = _OWNED.match(name)
    if not m:
        return False
    pid, start, namespace = (int(g) for g in m.groups())
    if namespace != _pid_namespace():
        return False
    if not _alive(pid):
        return True
    now = _start_time(pid)
    return now is not None and now != start


def join(procs):
    """Moves the calling process (all its threads) into the cgroup whose cgroup.procs file is
    `procs`: what a task does first."""
    _write(procs, str(os.getpid()))


class TaskGroups:
    """The memory cgroups of one launcher's tasks, HIERARCHY/tfps-PID-START-PIDNS/<task>, each capped.

        groups = TaskGroups.make(os.getpid(), {"ps0": 512 << 20, "chief0": 2 << 30})
        groups.procs("ps0")        # the file the task writes its pid to (join)
        groups.oom_kills("ps0")    # processes the kernel killed there for the cap
        groups.close()             # removed; returns the paths still there
    """

    def __init__(self, owner, hierarchy, caps):
        self.owner, self.hierarchy, self.caps = owner, hierarchy, dict(caps)
        self.parent = os.path.join(hierarchy.mount, owner_name(owner))
        self.made = []   # the directories this object made: the only ones close() touches

    @classmethod
    def make(cls, owner, caps, hierarchy=None):
        """Makes a group per task of caps {task: bytes} below a parent of its own (one that is
        there already is another launcher's: refused, untouched); on an error, removes what it
        made and raises CgroupError naming the file."""
        groups = cls(owner, hierarchy or check_available(), caps)
        v2 = groups.hierarchy.version == 2
        try:
            if v2:
                _enable_memory(groups.hierarchy.mount, groups.hierarchy)
            os.mkdir(groups.parent)
            groups.made.append(groups.parent)
            if v2:
                _enable_memory(groups.parent, groups.hierarchy)
            for task, cap in groups.caps.items():
                path = groups.path(task)
                os.mkdir(path)
                groups.made.append(path)
                if v2:
                    _write(os.path.join(path, "memory.max"), str(cap))
                    for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                        if os.path.exists(os.path.join(path, name)):
                            _write(os.path.join(path, name), value)
                else:   # the memory limit first: memory+swap may not be below it
                    _write(os.path.join(path, "memory.limit_in_bytes"), str(cap))
                    if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                        _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(cap))
        except CgroupError:
            groups.close()
            raise
        except OSError as e:
            groups.close()
            raise CgroupError(f"cluster.memory_cap_mib: cannot make the tasks' memory cgroups in {groups.parent} "
                              f"({groups.hierarchy}): {e.filename}: {e.strerror}") from None
        return groups

    def path(self, task):
        return os.path.join(self.parent, task)

    def procs(self, task):
        """The cgroup.procs file of the task's group (None: the task has no cap)."""
        return os.path.join(self.path(task), "cgroup.procs") if task in self.caps else None

    def oom_kills(self, task):
        """Processes the kernel's OOM killer killed in the task's group, for its cap (v2:
        memory.events' oom_kill; v1: memory.oom_control's, kernel 4.13+); None when unknown."""
        name = "memory.events" if self.hierarchy.version == 2 else "memory.oom_control"
        try:
            with open(os.path.join(self.path(task), name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return None

    def close(self):
        """Removes the groups this object made, the tasks' then the parent (a process still in a
        task's group, a task's own child once the tasks are reaped, is killed first); returns
        the paths still there. Nothing this object did not make is touched."""
        if not self.made:
            return []
        children = [p for p in self.made if p != self.parent]
        return _remove(children, self.parent if self.parent in self.made else None, kill=True)


def _remove(children, parent, kill=False, timeout=5.0):
    """Removes the groups children, then parent (None: none) once they are gone and it has no
    other group; with kill, a process still in one of children is killed first (else the group
    stays). Returns the paths still there."""
    deadline = time.monotonic() + timeout
    for path in children:
        while True:
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if not kill or e.errno != errno.EBUSY or time.monotonic() >= deadline:
                    break
                for pid in _words(os.path.join(path, "cgroup.procs")):
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                time.sleep(0.05)
    left = [p for p in children if os.path.exists(p)]
    if parent is not None and not left:
        try:
            os.rmdir(parent)   # not emptied of anything: a group there that is not ours keeps it
        except OSError:
            pass
    return left + ([parent] if parent is not None and os.path.exists(parent) else [])


def _empty(group):
    """Whether no process is in the group (False when its cgroup.procs cannot be read)."""
    try:
        with open(os.path.join(group, "cgroup.procs")) as f:
            return not f.read().split()
    except OSError:
        return False


def sweep(hierarchy):
    """Removes the groups tfps-PID-START-PIDNS of launchers that are gone (killed with kill -9): only
    when the name's record says the launcher is dead (of this pid namespace, its pid gone or
    another process's) and no process is in the parent or any of its groups; kills nothing and
    leaves a group whose owner cannot be judged. Returns the names removed."""
    try:
        names = os.listdir(hierarchy.mount)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        if not _owner_gone(name):
            continue
        parent = os.path.join(hierarchy.mount, name)
        try:
            children = [os.path.join(parent, n) for n in os.listdir(parent) if os.path.isdir(os.path.join(parent, n))]
        except OSError:
            continue
        if all(_empty(g) for g in children + [parent]) and not _remove(children, parent):
            removed.append(name)
    return removed
