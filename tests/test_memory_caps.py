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
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc

import tfps.embedding.checkpoint_tools
from tfps.cluster import cgroups
from tfps.cluster import launch as launch_lib
from tfps.cluster.launch_config import LaunchConfig
from tfps.config import ConfigError, load_config
from tfps.data import SyntheticCriteo
from tfps.data.sources import eval_set
from tfps.embedding import layout
from serve_client import _request, _rest
from test_launch import SMALL, _wait_for
from test_serving import score_saved_model


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


@needs_cgroups
@pytest.mark.slow
def test_a_model_whose_checkpoint_through_one_ps_overflows_its_cap_trains_on_4_capped_ps_resumes_on_3(
        tmp_path, forker):
    """The model's table (about 950,000 rows of dim 32 with Adagrad slots: about 270 MB in
    memory) on PS tasks capped at 448 MiB each: a save or restore that passed the
    whole table through one PS (2.45 times the table on it, as tfps did before parts) could not
    fit. On 4 capped PS tasks, one trainer, it trains and saves (each PS its own part), is killed
    -9, resumes on 3 capped PS tasks (each restoring only the rows of its keys) writing deltas,
    and ends: no task was killed by its cap, and every row's key, update count and value equal
    those of one uncapped process that trained the same steps (one trainer: the same batches in
    the same order). A stock export of the 4-PS checkpoint, made by a capped export process, is
    served by `tfps serve --follow` in a memory group of its own while the 3 PS train: it applies
    their deltas and final checkpoint, and at step 20 scores as the (capped) export of step 20
    does. Its cap, 896 MiB, is the server's fixed cost (about 480 MiB: TensorFlow, gRPC, the
    graph), the served table (about 140 MiB with its index) and one new copy of it; the follower
    that read a checkpoint's whole columns and copied them again peaked at 923 MiB."""
    sets = [s for s in GROWING if not s.startswith("train.steps=")] + [
        "train.save_checkpoints_steps=10", "train.log_every_steps=4"]
    oracle = forker.run(["train", "--config", "configs/demo.yaml", *[a for s in sets + ["train.steps=20"] + [
        f"model_dir={tmp_path / 'one'}"] for a in ("--set", s)]], tmp_path / "one", timeout=300)
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    model_dir = tmp_path / "m"
    caps = ["cluster.memory_cap_mib.ps=448", "train.steps=20"]

    def launch(ps, more, log):
        return forker.start(["launch", "--config", "configs/demo.yaml", "--ps", str(ps), "--workers", "1"]
                            + [a for s in sets + caps + more + [f"model_dir={model_dir}"] for a in ("--set", s)],
                            f"{log}.out", f"{log}.err")

    first = launch(4, [], tmp_path / "first")
    try:
        _wait_for(lambda: (model_dir / "model.ckpt-10.index").exists(), "the 4-PS checkpoint at step 10", timeout=240)
        os.kill(first.pid, signal.SIGKILL)   # the launcher and, with it, every task
        first.wait(60)
    finally:
        first.kill()
    reader = tf.train.load_checkpoint(str(model_dir / "model.ckpt-10"))
    (table,) = layout.table_names(reader.get_variable_to_shape_map())
    assert int(reader.get_tensor(f"{table}-parts")) == 4
    # A stock export of the 4-PS checkpoint, from a capped export process, served by `tfps serve
    # --follow` in a memory cgroup of its own while the 3 PS train on and write deltas.
    cap = 768 << 20
    first_export, _ = _capped_export(sets + [f"model_dir={model_dir}"], tmp_path / "served", cap)
    cfg = load_config("configs/demo.yaml", sets + [f"model_dir={model_dir}"])
    features, _, _ = eval_set(SyntheticCriteo(cfg.data), 64, 64)
    inputs = {"dense": features["dense"], "ids": features["ids"]}
    at_checkpoint = score_saved_model(first_export, inputs)
    serve_groups = cgroups.TaskGroups.make(os.getpid(), {"serve": 896 << 20})
    server = _capped_serve(serve_groups, os.path.dirname(first_export), model_dir, tmp_path)
    try:
        ready = json.loads(server.stdout.readline())
        second = launch(3, ["train.delta_every_secs=0.3"], tmp_path / "second")
        try:
            assert second.wait(300) == 0, second.output()[-3000:] + second.errors()[-3000:]
        finally:
            second.kill()
        def at_step_20():
            assert server.poll() is None, (f"tfps serve exited {server.returncode}, OOM kills "
                                           f"{serve_groups.oom_kills('serve')}: {_read_file(tmp_path, 'serve.err')[-3000:]}")
            return _served_step(ready["rest_api_port"]) == 20
        _wait_for(at_step_20, "the served tables at step 20", timeout=120)
        with grpc.insecure_channel(f"127.0.0.1:{ready['grpc_port']}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            served = tf.make_ndarray(stub.Predict(_request(inputs), timeout=60).outputs["probabilities"])
        assert server.poll() is None and serve_groups.oom_kills("serve") in (0, None)
    finally:
        server.kill()
        server.wait(60)
        serve_groups.close()
    final = json.loads(second.output().strip().splitlines()[-1])
    assert final["oom_kills"] == {} and final["restarts"] == {}, final
    want = _rows(str(tmp_path / "one"))
    got = _rows(str(model_dir))
    assert len(want["keys"]) > 9 * 10**5 and 2.45 * want["bytes"] > (448 << 20)   # the old save alone overflows a cap
    np.testing.assert_array_equal(got["keys"], want["keys"])
    np.testing.assert_array_equal(got["freq"], want["freq"])
    np.testing.assert_allclose(got["values"], want["values"], rtol=1e-5, atol=1e-6)
    # The deltas the 3 PS wrote after the 4-PS checkpoint, applied to it in 2 shards: each row is
    # the final one wherever the final checkpoint has not updated it since the last delta.
    from tfps.state import deltas
    chain = [(s, p) for s, p in deltas.delta_files(str(model_dir), after_step=10) if s < 20]
    assert chain, os.listdir(model_dir)
    cut = _rows(str(model_dir / "model.ckpt-10"), chain)
    still = got["last_step"] < chain[-1][0]   # rows stamped before the step the last delta holds
    assert set(cut["keys"].tolist()) >= set(got["keys"][still].tolist())
    at = np.searchsorted(cut["keys"], got["keys"][still])
    np.testing.assert_array_equal(cut["keys"][at], got["keys"][still])
    np.testing.assert_array_equal(cut["freq"][at], got["freq"][still])
    np.testing.assert_array_equal(cut["values"][at], got["values"][still])
    # The stock export of the newest cut, from a process capped below what an export that held
    # the model whole needed (8.7 times the bytes it writes, before it streamed), holds exactly
    # those rows.
    path, exported = _capped_export(sets + [f"model_dir={model_dir}"], tmp_path / "exports", cap)
    keys, values = exported.get_tensor(f"{table}/stock_keys"), exported.get_tensor(f"{table}/stock_values")
    assert 8.7 * (keys.nbytes + values.nbytes) > cap
    order = np.argsort(keys)
    np.testing.assert_array_equal(keys[order], got["keys"])
    np.testing.assert_array_equal(values[1:][order], got["values"])
    np.testing.assert_array_equal(values[0], np.zeros_like(values[0]))
    # What the follower served at step 20 is what the export of step 20 scores, and the deltas and
    # checkpoint it applied changed the scores of the 4-PS checkpoint.
    want = score_saved_model(path, inputs)
    assert np.abs(want - at_checkpoint).max() > 1e-3
    np.testing.assert_allclose(served, want, rtol=1e-5, atol=1e-6)


def _capped_serve(groups, base_path, model_dir, tmp_path):
    """`tfps serve --follow model_dir` of the export under base_path in the memory group "serve",
    on port 0 and a free REST port: the Popen, whose first line on stdout is the ready line."""
    procs = groups.procs("serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        rest = s.getsockname()[1]
    return subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tfps"), "serve", "--port", "0",
                             "--rest_api_port", str(rest), "--model_base_path", str(base_path), "--model_name", "demo",
                             "--follow", str(model_dir), "--file_system_poll_wait_seconds", "0.2"],
                            preexec_fn=lambda: cgroups.join(procs), stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "serve.err", "w"), text=True)


def _served_step(port):
    """The step of the tables `tfps serve` on REST `port` serves (its metadata's tfps_state)."""
    status, body = _rest(port, "/v1/models/demo/metadata")
    assert status == 200, body
    return body["metadata"]["tfps_state"]["step"]


def _capped_export(sets, export_dir, cap):
    """`tfps export` (stock) in a memory cgroup of its own capped at `cap` bytes: the SavedModel's
    path and a reader of its variables."""
    groups = cgroups.TaskGroups.make(os.getpid(), {"export": cap})
    try:
        procs = groups.procs("export")
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "tfps"), "export", "--config",
                               "configs/demo.yaml", "--format", "stock", "--export-dir", str(export_dir)]
                              + [a for s in sets for a in ("--set", s)],
                              preexec_fn=lambda: cgroups.join(procs), capture_output=True, text=True, timeout=300,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert done.returncode == 0, (groups.oom_kills("export"), done.stderr[-3000:])
        assert groups.oom_kills("export") in (0, None)
    finally:
        groups.close()
    path = json.loads(done.stdout.strip().splitlines()[-1])["saved_model"]
    return path, tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))


def _rows(model_dir, chain=None):
    """The table of model_dir's newest cut (its checkpoint, and its deltas applied in a session of
    its own, as a resume does), or of checkpoint `model_dir` and the deltas `chain`, sorted by
    key, and the bytes it holds in a table."""
    from tfps.state import deltas
    from tfps.embedding.variable import get_embedding_variable
    if chain is None:
        checkpoint, chain, step = deltas.latest_cut(model_dir)
        assert step == 20, (checkpoint, chain, step)
    else:
        checkpoint = model_dir
    reader = tf.train.load_checkpoint(checkpoint)
    (table,) = layout.table_names(reader.get_variable_to_shape_map())
    dim = int(reader.get_variable_to_shape_map()[f"{table}-slot_init"][0] and
              layout.table_shapes(reader, table)["values"][1])
    with tf.Graph().as_default():
        ev = get_embedding_variable(table, dim, num_shards=2)
        restore = tfps.embedding.checkpoint_tools.restore_table(checkpoint, ev)
        prefix = tf.compat.v1.placeholder(tf.string, [])
        apply = deltas.apply_tables_op([ev], prefix)
        export = ev.export()
        stats = ev.memory_stats()
        with tf.compat.v1.Session() as s:
            s.run(restore)
            for _, delta in chain:
                s.run(apply, {prefix: delta})
            rows, used = s.run([export, stats["bytes_in_use"]])
    order = np.argsort(rows["keys"])
    return {"keys": rows["keys"][order], "freq": rows["freq"][order], "values": rows["values"][order],
            "last_step": rows["last_step"][order], "bytes": int(used)}
