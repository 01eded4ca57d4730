"""Memory caps per task for `tfps launch` (cluster.memory_cap_mib), as a cluster manager gives
them: each capped task in a memory cgroup of its own. Linux, root, and a writable memory
controller: cgroup v2 where the unified hierarchy offers it, else cgroup v1's memory hierarchy.

For the launcher of pid P, at the root of the hierarchy's mount:

    v2  /sys/fs/cgroup/tfps-P/<task>          memory.max = the cap, memory.swap.max = 0,
                                              memory.oom.group = 1
    v1  /sys/fs/cgroup/memory/tfps-P/<task>   memory.limit_in_bytes = the cap, and
                                              memory.memsw.limit_in_bytes too where swap is accounted

(tfps-P itself has no cap; on v2 it passes the memory controller down). A task joins its group
itself (`join`) before it runs anything: a forked one right after the fork, an exec'd one right
after the exec (tfps.cluster.process). A restarted task goes back into the same group. A process
over its cap is killed by the kernel (SIGKILL), and the group's counter says so (`oom_kills`:
v2's memory.events, v1's memory.oom_control, kernel 4.13+). The groups are removed when the
launcher ends (`TaskGroups.close`); those of launchers that are gone (kill -9) are removed by the
next launch (`sweep`).
"""
import dataclasses
import errno
import os
import re
import signal
import sys
import time

MOUNTINFO = "/proc/self/mountinfo"
_OWNED = re.compile(r"^tfps-([0-9]+)$")


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


def _enable_memory(group):
    """v2: the memory controller for group's children (cgroup.subtree_control)."""
    control = os.path.join(group, "cgroup.subtree_control")
    if "memory" not in _words(control):
        _write(control, "+memory")


def join(procs):
    """Moves the calling process (all its threads) into the cgroup whose cgroup.procs file is
    `procs`: what a task does first."""
    _write(procs, str(os.getpid()))


class TaskGroups:
    """The memory cgroups of one launcher's tasks, HIERARCHY/tfps-OWNER/<task>, each capped.

        groups = TaskGroups.make(os.getpid(), {"ps0": 512 << 20, "chief0": 2 << 30})
        groups.procs("ps0")        # the file the task writes its pid to (join)
        groups.oom_kills("ps0")    # processes the kernel killed there for the cap
        groups.close()             # removed; returns the paths still there
    """

    def __init__(self, owner, hierarchy, caps):
        self.owner, self.hierarchy, self.caps = owner, hierarchy, dict(caps)
        self.parent = os.path.join(hierarchy.mount, f"tfps-{owner}")

    @classmethod
    def make(cls, owner, caps, hierarchy=None):
        """Makes a group per task of caps {task: bytes}; on an error, removes what it made and
        raises CgroupError naming the file."""
        groups = cls(owner, hierarchy or check_available(), caps)
        v2 = groups.hierarchy.version == 2
        _remove(groups.parent)   # left by an earlier process of this pid, killed with kill -9
        try:
            os.makedirs(groups.parent, exist_ok=True)
            if v2:
                _enable_memory(groups.hierarchy.mount)
                _enable_memory(groups.parent)
            for task, cap in groups.caps.items():
                path = groups.path(task)
                os.mkdir(path)
                if v2:
                    _write(os.path.join(path, "memory.max"), str(cap))
                    for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                        if os.path.exists(os.path.join(path, name)):
                            _write(os.path.join(path, name), value)
                else:   # the memory limit first: memory+swap may not be below it
                    _write(os.path.join(path, "memory.limit_in_bytes"), str(cap))
                    if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                        _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(cap))
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
        """Removes every group and the parent (a process still in one, a task's own child once
        the tasks are reaped, is killed first); returns the paths still there."""
        return _remove(self.parent, kill=True)


def _remove(parent, kill=False, timeout=5.0):
    """Removes parent's task groups, then parent; with kill, a process still in a group is killed
    first (else the group stays). Returns the paths still there."""
    deadline = time.monotonic() + timeout
    try:
        children = [os.path.join(parent, n) for n in os.listdir(parent)
                    if os.path.isdir(os.path.join(parent, n))]
    except FileNotFoundError:
        return []
    except OSError:
        return [parent]
    for path in children + [parent]:
        if path == parent and any(os.path.exists(c) for c in children):
            break
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
    return [p for p in children + [parent] if os.path.exists(p)]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(hierarchy):
    """Removes the groups tfps-P of launchers P that are gone (killed with kill -9) and that no
    process is in (a process there is left alone: P may be a pid of another pid namespace);
    returns the names removed."""
    try:
        names = os.listdir(hierarchy.mount)
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        m = _OWNED.match(name)
        if m and not _alive(int(m.group(1))) and not _remove(os.path.join(hierarchy.mount, name)):
            removed.append(name)
    return removed
