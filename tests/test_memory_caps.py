"""Memory caps per task (cluster.memory_cap_mib, tfps.cluster.cgroups): `tfps launch` puts each
capped task in a memory cgroup of its own, as a cluster manager does.

Oracles: the kernel's view of a task (/proc/<pid>/cgroup), its group's limit files and OOM-kill
count, the hierarchy's directory once the launcher is gone, and the launcher's final JSON
(`restarts`, `oom_kills`). Needs root and a writable memory controller (skipped, with the reason,
elsewhere), except the validation test."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tfps.cluster import cgroups
from tfps.cluster import launch as launch_lib
from tfps.cluster.launch_config import LaunchConfig
from tfps.config import ConfigError, load_config
from test_launch import SMALL, _wait_for


def _hierarchy():
    try:
        return cgroups.check_available()
    except cgroups.CgroupError:
        return None


HIERARCHY = _hierarchy()
needs_cgroups = pytest.mark.skipif(HIERARCHY is None, reason="memory caps need root and a writable memory cgroup "
                                                              "controller (v2, or v1's memory hierarchy)")
CAN_NETNS = os.geteuid() == 0 and shutil.which("ip") and os.path.exists("/proc/self/ns/net")


def _memory_cgroup(pid):
    """The cgroup of process pid in HIERARCHY, as the kernel lists it in /proc/<pid>/cgroup (None
    when the process is gone)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (HIERARCHY.version == 2 and controllers == "") or "memory" in controllers.split(","):
            return path
    return None


def _read(group, name):
    with open(os.path.join(HIERARCHY.mount, group.lstrip("/"), name)) as f:
        return f.read().strip()


def _swap_accounted():
    """Whether the kernel accounts swap per cgroup: the swap limit file is there (at v1's root; in
    v2's groups below the root)."""
    if HIERARCHY.version == 1:
        return os.path.exists(os.path.join(HIERARCHY.mount, "memory.memsw.limit_in_bytes"))
    return any(os.path.exists(os.path.join(HIERARCHY.mount, d, "memory.swap.max")) for d in os.listdir(HIERARCHY.mount))


def _limits(group):
    """{file: value} of a group's memory limits (the swap one where swap is accounted)."""
    names = (("memory.max", "memory.swap.max") if HIERARCHY.version == 2 else
             ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"))
    return {n: _read(group, n) for n in names if os.path.exists(os.path.join(HIERARCHY.mount, group.lstrip("/"), n))}


def _expected_limits(mib):
    """The cap, and no swap beyond it where the kernel accounts swap."""
    if HIERARCHY.version == 2:
        return {"memory.max": str(mib << 20), **({"memory.swap.max": "0"} if _swap_accounted() else {})}
    return {"memory.limit_in_bytes": str(mib << 20),
            **({"memory.memsw.limit_in_bytes": str(mib << 20)} if _swap_accounted() else {})}


def _ours():
    return sorted(n for n in os.listdir(HIERARCHY.mount) if n.startswith("tfps-"))


def test_memory_caps_are_validated_and_refused_without_root_or_a_memory_controller(tmp_path, cli, monkeypatch):
    cfg = load_config("configs/demo.yaml", ["cluster.memory_cap_mib={ps: 512, chief: 2048}"])
    assert cfg.cluster.memory_cap_mib.by_job() == {"ps": 512, "chief": 2048}
    for value, message in (("{ps: 0}", r"cluster.memory_cap_mib.ps must be in \[64, 16777216\], got 0"),
                           ("{worker: -1}", r"cluster.memory_cap_mib.worker must be in \[64, 16777216\]"),
                           ("{evaluator: 33554432}", r"cluster.memory_cap_mib.evaluator must be in"),
                           ("{ps: 512.5}", r"'cluster.memory_cap_mib.ps' must be int"),
                           ("{ps: true}", r"'cluster.memory_cap_mib.ps' must be int"),
                           ("{pss: 512}", r"unknown config key 'cluster.memory_cap_mib.pss' \(known: chief, "
                                          r"evaluator, ps, worker\)"),
                           ("512", r"'cluster.memory_cap_mib' must be a mapping")):
        with pytest.raises(ConfigError, match=message):
            load_config("configs/demo.yaml", [f"cluster.memory_cap_mib={value}"])
    with monkeypatch.context() as m:
        m.setattr(os, "geteuid", lambda: 1000)
        with pytest.raises(cgroups.CgroupError, match="needs root"):
            cgroups.check_available()
        code, _, _ = cli("launch", "--config", "configs/demo.yaml", "--ps", "1", "--workers", "1",
                         "--set", "cluster.memory_cap_mib.ps=512", "--set", f"model_dir={tmp_path / 'm'}")
        assert code == 2
    no_memory = tmp_path / "mountinfo"   # cgroup v1 without memory, and a unified hierarchy without it
    no_memory.write_text("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
                         f"40 31 0:37 / {tmp_path} rw,relatime - cgroup2 cgroup2 rw\n")
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    with monkeypatch.context() as m:
        m.setattr(cgroups, "MOUNTINFO", str(no_memory))
        m.setattr(os, "geteuid", lambda: 0)
        with pytest.raises(cgroups.CgroupError, match="needs the memory cgroup controller"):
            cgroups.check_available()
        code, _, _ = cli("launch", "--config", "configs/demo.yaml", "--ps", "1", "--workers", "1",
                         "--set", "cluster.memory_cap_mib.ps=512", "--set", f"model_dir={tmp_path / 'm'}")
        assert code == 2
    assert not (tmp_path / "m").exists()   # refused before any task, log or directory
    # The controller there, but the groups cannot be made (here: the hierarchy's mount is a file):
    # refused too, before model_dir/logs or a temporary model_dir is made.
    (tmp_path / "not_a_hierarchy").write_text("")
    (tmp_path / "tmp").mkdir()
    with monkeypatch.context() as m:
        m.setattr(os, "geteuid", lambda: 0)
        m.setattr(cgroups, "check_available", lambda: cgroups.Hierarchy(1, str(tmp_path / "not_a_hierarchy")))
        m.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        for model_dir in ([f"model_dir={tmp_path / 'm'}"], []):
            code, out, err = cli("launch", "--config", "configs/demo.yaml", "--ps", "1", "--workers", "1",
                                 "--set", "cluster.memory_cap_mib.ps=512",
                                 *[a for s in model_dir for a in ("--set", s)])
            assert code == 2 and "cannot make the tasks' memory cgroups" in out + err, out + err
    assert not (tmp_path / "m").exists() and not list((tmp_path / "tmp").iterdir())


def _fake_hierarchy(tmp_path, monkeypatch):
    """A directory standing for a v1 hierarchy (where a group's cgroup.procs is a file of ours), with
    os.kill recorded instead of sent and a group's removal a plain rmtree."""
    mount = tmp_path / "hierarchy"
    mount.mkdir()
    kills = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)) if sig else None)
    monkeypatch.setattr(cgroups, "_alive", lambda pid: pid == os.getpid())
    real_remove = cgroups._remove

    def remove(children, parent, kill=False, timeout=5.0):   # a plain directory keeps its files: empty them first
        for path in children + ([parent] if parent else []):
            for name in os.listdir(path):
                if not os.path.isdir(os.path.join(path, name)):
                    os.remove(os.path.join(path, name))
        return real_remove(children, parent, kill, timeout)
    monkeypatch.setattr(cgroups, "_remove", remove)
    return cgroups.Hierarchy(1, str(mount)), kills


def _group(mount, name, tasks, procs=""):
    for task in tasks:
        os.makedirs(os.path.join(mount, name, task))
        with open(os.path.join(mount, name, task, "cgroup.procs"), "w") as f:
            f.write(procs)
    with open(os.path.join(mount, name, "cgroup.procs"), "w") as f:
        f.write("")


def test_a_sweep_removes_only_the_empty_groups_of_launchers_dead_by_their_record_and_kills_nothing(
        tmp_path, monkeypatch):
    """The parent's name is its owner record, tfps-PID-START-PIDNS: a sweep removes it when that
    launcher is dead (of this pid namespace; its pid gone, or another process's now) and no
    process is in any of its groups, and leaves alone a live launcher's (its emptied group is
    waiting for a restarted task), one of another pid namespace (a container's launcher, whose
    pid means nothing here), a busy one, and one of another naming."""
    hierarchy, kills = _fake_hierarchy(tmp_path, monkeypatch)
    mount, me, ns = hierarchy.mount, os.getpid(), os.stat("/proc/self/ns/pid").st_ino
    dead = 4194304 + 7   # above any pid_max: no such process
    mine = cgroups.owner_name(me)
    assert mine == f"tfps-{me}-{cgroups._start_time(me)}-{ns}"
    _group(mount, f"tfps-{dead}-123-{ns}", ["ps0", "chief0"])                 # dead, empty: removed
    _group(mount, f"tfps-{me}-{cgroups._start_time(me) + 1}-{ns}", ["ps0"])   # its pid now another's: removed
    _group(mount, mine, ["ps0", "chief0"])                                      # alive: left
    _group(mount, f"tfps-{dead}-123-{ns + 1}", ["ps0"])                        # another pid namespace: left
    _group(mount, f"tfps-{dead}-124-{ns}", ["ps0"], procs="4242\n")           # a process in it: left
    _group(mount, f"tfps-{dead}", ["ps0"])                                      # no record: left
    reused = f"tfps-{me}-{cgroups._start_time(me) + 1}-{ns}"
    assert cgroups.sweep(hierarchy) == sorted([f"tfps-{dead}-123-{ns}", reused])
    assert sorted(os.listdir(mount)) == sorted([mine, f"tfps-{dead}-123-{ns + 1}", f"tfps-{dead}-124-{ns}",
                                                f"tfps-{dead}"])
    assert sorted(os.listdir(os.path.join(mount, mine))) == ["cgroup.procs", "chief0", "ps0"]
    assert kills == []


def test_groups_are_made_under_a_parent_of_their_own_and_another_launchers_are_never_touched(tmp_path, monkeypatch):
    """A parent of this name already there is another launcher's: the make is refused naming it, and
    nothing in it is removed or killed; a launcher's close kills only in the groups it made."""
    hierarchy, kills = _fake_hierarchy(tmp_path, monkeypatch)
    theirs = os.path.join(hierarchy.mount, cgroups.owner_name(os.getpid()))
    _group(hierarchy.mount, os.path.basename(theirs), ["ps0"], procs="4242\n")
    with pytest.raises(cgroups.CgroupError, match="cannot make the tasks' memory cgroups .*File exists"):
        cgroups.TaskGroups.make(os.getpid(), {"ps0": 256 << 20}, hierarchy)
    assert sorted(os.listdir(theirs)) == ["cgroup.procs", "ps0"] and kills == []
    shutil.rmtree(theirs)
    groups = cgroups.TaskGroups.make(os.getpid(), {"ps0": 256 << 20, "chief0": 512 << 20}, hierarchy)
    assert groups.parent == theirs and sorted(os.listdir(groups.parent)) == ["chief0", "ps0"]
    assert _read_file(groups.path("ps0"), "memory.limit_in_bytes") == str(256 << 20)
    os.mkdir(os.path.join(groups.parent, "other"))   # not made by this launcher: it stays, and so does the parent
    assert groups.close() == [groups.parent] and os.listdir(groups.parent) == ["other"] and kills == []


def _read_file(directory, name):
    with open(os.path.join(directory, name)) as f:
        return f.read()


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", ""])
    p.wait()
    return p.pid


@needs_cgroups
@pytest.mark.slow
@pytest.mark.parametrize("netns", [False, pytest.param(True, marks=pytest.mark.skipif(
    not CAN_NETNS, reason="emulated hosts need root and iproute2"))])
def test_each_capped_task_runs_in_a_cgroup_of_its_own_under_its_cap_and_the_groups_go_with_the_launcher(
        tmp_path, netns):
    """Forked tasks (the default), on loopback and as emulated hosts: each capped task's process
    is in tfps-<launcher>/<task> with its cap and no swap, an uncapped one stays in the
    launcher's own group; SIGTERM to the launcher (as Ctrl-C) removes every group, and the groups
    a launcher killed with kill -9 left behind are removed by the next launch."""
    stale = os.path.join(HIERARCHY.mount, f"tfps-{_dead_pid()}-1-{os.stat('/proc/self/ns/pid').st_ino}")
    os.makedirs(os.path.join(stale, "ps0"))
    ready = tmp_path / "ready"
    ready.mkdir()

    def task(argv):   # each task says it runs, then waits to be stopped
        signal.signal(signal.SIGTERM, signal.SIG_DFL)   # (not this test's handler, which it was forked with)
        spec = json.loads(os.environ["TF_CONFIG"])["task"]
        (ready / f"{spec['type']}{spec['index']}").write_text(str(os.getpid()))
        time.sleep(300)
        return 0

    seen, done = {}, threading.Event()

    def check():   # while the job runs: the kernel's view of each task, then SIGTERM to the launcher
        try:
            _wait_for(lambda: len(list(ready.iterdir())) == 4, "every task to start", timeout=60)
            for name in ("ps0", "ps1", "chief0", "worker0"):
                group = _memory_cgroup(int((ready / name).read_text()))
                seen[name] = (group, _limits(group) if group != _memory_cgroup(os.getpid()) else "own")
        finally:
            done.set()
            os.kill(os.getpid(), signal.SIGTERM)
    # (The launcher stops its job on SIGTERM; this process ignores one that comes after the job.)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    checker = threading.Thread(target=check)
    checker.start()
    model_dir = tmp_path / "m"
    try:
        code = launch_lib.launch(LaunchConfig(overrides=("cluster.memory_cap_mib={ps: 100, chief: 300}",
                                                         f"model_dir={model_dir}"), num_ps=2, num_workers=2,
                                              model_dir=str(model_dir), netns=netns),
                                 task_main=task, printer=lambda *a, **k: None)
        checker.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert done.is_set() and code == 130
    me, mine = os.getpid(), cgroups.owner_name()
    assert seen == {"ps0": (f"/{mine}/ps0", _expected_limits(100)),
                    "ps1": (f"/{mine}/ps1", _expected_limits(100)),
                    "chief0": (f"/{mine}/chief0", _expected_limits(300)),
                    "worker0": (_memory_cgroup(me), "own")}
    assert not os.path.exists(stale)
    assert mine not in _ours()


# The demo's model, its table made to outgrow a small PS quickly: uniform ids over 26 x 200k (each
# step brings ~50k new rows to the one PS; ~900 MiB after 20 steps).
GROWING = SMALL + ["train.batch_size=2048", "data.vocab_min=200000", "data.vocab_max=200000", "data.zipf=0",
                   "model.embedding_dim=32", "train.steps=20", "eval.examples=2000"]


def _launch_argv(model_dir, sets):
    return (["launch", "--config", "configs/demo.yaml", "--ps", "1", "--workers", "1"]
            + [a for s in GROWING + sets + [f"model_dir={model_dir}"] for a in ("--set", s)])


@needs_cgroups
@pytest.mark.slow
def test_a_ps_over_its_cap_is_killed_by_the_kernel_and_restarted_until_the_restarts_run_out(tmp_path, forker):
    """A PS capped at 192 MiB, whose shard passes that within a few steps: the kernel kills it (its
    group counts the kill), the launcher restarts it, the chief restores it, it outgrows its cap
    again, and with its one restart spent the job fails (exit 1), its last line a JSON of what
    happened. Its group is gone with the launcher."""
    job = forker.start(_launch_argv(tmp_path / "m", ["cluster.memory_cap_mib.ps=192"]) + ["--max-restarts", "1"],
                       f"{tmp_path}.launch.out", f"{tmp_path}.launch.err")
    try:
        assert job.wait(300) == 1, job.output()[-3000:] + job.errors()[-3000:]
    finally:
        job.kill()
    final = json.loads(job.output().strip().splitlines()[-1])
    assert final["restarts"] == {"ps0": 1} and final["oom_kills"] == {"ps0": 2}, final
    assert final["exit_code"] == 1
    assert not [n for n in _ours() if n.startswith(f"tfps-{job.pid}-")]


@needs_cgroups
@pytest.mark.slow
def test_the_same_job_under_caps_that_fit_passes_with_exec_d_tasks_in_their_groups(tmp_path, forker):
    """The job above with caps that fit (2 GiB a PS, 4 GiB the chief), each task a new interpreter
    (cluster.fork_tasks: false): each joins its group right after its exec, the job ends well with
    no kill and no restart, and the groups are gone."""
    model_dir = tmp_path / "m"
    job = forker.start(_launch_argv(model_dir, ["cluster.memory_cap_mib={ps: 2048, chief: 4096}",
                                                "cluster.fork_tasks=false"]),
                       f"{tmp_path}.launch.out", f"{tmp_path}.launch.err")
    try:
        for name, mib in (("ps0", 2048), ("chief0", 4096)):
            pid_file = model_dir / "logs" / f"{name}.pid"
            group = f"/{cgroups.owner_name(job.pid)}/{name}"
            _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()
                      and _memory_cgroup(int(pid_file.read_text())) == group, f"{name} in its group", timeout=60)
            assert _limits(group) == _expected_limits(mib)
        assert job.wait(300) == 0, job.output()[-3000:]
    finally:
        job.kill()
    metrics = json.loads(job.output().strip().splitlines()[-1])
    assert metrics["restarts"] == {} and metrics["oom_kills"] == {}
    assert metrics["local_steps"] == 20
    assert not [n for n in _ours() if n.startswith(f"tfps-{job.pid}-")]
