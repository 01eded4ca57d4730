"""The table's threads are the session's (kernels/session_threads.h): the table's parallel work
runs within the session's intra-op pool, bounded by the process's CPU affinity and its cgroup CPU
quota. Oracle: the CPU time of every thread of a process (/proc/self/task/*/stat) while it runs
lookups of 400,000 keys -- far above the size at which a batch is split over threads -- on one
table; a thread is busy when it ran at least a quarter of the busiest one's time. Each case runs
in a process of its own (TensorFlow sizes its pools once per process)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, os, sys
intra, cpus = int(sys.argv[1]), sys.argv[2]
if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
import numpy as np, tensorflow as tf
from tfps.ops import embedding_table as et
tf.compat.v1.disable_eager_execution()
keys = np.random.default_rng(0).choice(2**40, 400_000, replace=False).astype(np.int64)
handle = et.table_handle(16, "uniform", -0.1, 0.1, seed=1, shared_name="t")
ids = tf.compat.v1.placeholder(tf.int64, [None])
find = tf.reduce_sum(et.table_find(handle, ids, insert=True))
config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra, inter_op_parallelism_threads=1)

def cpu_by_thread():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])   # utime + stime, in clock ticks
    return out

with tf.compat.v1.Session(config=config) as s:
    s.run(et.table_initialize(handle))
    feed = {ids: keys}
    s.run(find, feed)
    before = cpu_by_thread()
    for _ in range(40):
        s.run(find, feed)
    after = cpu_by_thread()
spent = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
print(json.dumps({"spent": spent}))
"""


def _busy(intra=0, cpus="", preexec=None):
    done = subprocess.run([sys.executable, "-c", CHILD, str(intra), cpus], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, preexec_fn=preexec, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    spent = json.loads(done.stdout.strip().splitlines()[-1])["spent"]
    assert spent[0] > 0, spent
    return sum(1 for t in spent if t >= spent[0] / 4), spent


needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to tell 1 busy thread from 2")


@needs_two
def test_the_default_session_splits_the_tables_work_over_every_core():
    busy, spent = _busy()
    assert busy >= 2, spent


@needs_two
def test_intra_op_parallelism_threads_1_gives_the_tables_work_one_thread():
    busy, spent = _busy(intra=1)
    assert busy == 1, spent


@needs_two
def test_an_affinity_of_one_core_gives_the_tables_work_one_thread():
    busy, spent = _busy(cpus=str(sorted(os.sched_getaffinity(0))[0]))
    assert busy == 1, spent


def _cpu_cgroup():
    """The cgroup v1 cpu hierarchy's mount point, if this process may make a group there."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            fields = tail.split()
            if len(fields) >= 3 and fields[0] == "cgroup" and "cpu" in fields[2].split(","):
                mount = head.split()[4]
                if os.geteuid() == 0 and os.access(mount, os.W_OK):
                    return mount
    return None


class _Quota:
    """A cgroup v1 cpu group of `cpus` CPUs (cfs quota over a 100 ms period), removed on exit;
    join() moves the calling process into it (a preexec_fn)."""

    def __init__(self, cpus):
        self.group = os.path.join(_cpu_cgroup(), f"tfps-test-{os.getpid()}")
        self.cpus = cpus

    def __enter__(self):
        os.mkdir(self.group)
        for name, value in (("cpu.cfs_period_us", 100000), ("cpu.cfs_quota_us", int(100000 * self.cpus))):
            with open(os.path.join(self.group, name), "w") as f:
                f.write(str(value))
        return self

    def join(self):
        with open(os.path.join(self.group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def __exit__(self, *exc):
        os.rmdir(self.group)


needs_cpu_cgroup = pytest.mark.skipif(_cpu_cgroup() is None, reason="needs root and a writable cgroup v1 cpu controller")


@needs_two
@needs_cpu_cgroup
def test_a_cpu_quota_of_one_cpu_gives_the_tables_work_one_thread():
    """A process under a CPU quota, as a cluster manager sets one: the session's pool is the
    machine's (TensorFlow does not read the quota), the table's work is the quota's."""
    with _Quota(1) as quota:
        busy, spent = _busy(preexec=quota.join)
    assert busy == 1, spent


PS = r"""
import sys
import tensorflow as tf
import tfps.ops.embedding_table   # the op library, registered in the server
# One inter-op thread: every step's ops run on the same thread (with more, steps take turns on
# them, and a thread count over the steps counts the turns, not the parallelism).
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1)
server = tf.distribute.Server({"ps": [sys.argv[1]]}, job_name="ps", task_index=0, config=config, start=True)
print("ready", flush=True)
server.join()
"""


def _ps_thread_cpu(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])
    return out


@needs_two
@needs_cpu_cgroup
@pytest.mark.parametrize("cpus", [1, 2])
def test_a_ps_task_under_a_cpu_quota_runs_the_tables_work_on_its_quota(cpus):
    """A PS task (tf.distribute.Server) in a cgroup of `cpus` CPUs serves lookups of 400,000 keys
    from a client session (the keys are a constant on the PS and one value comes back: little
    gRPC work): one busy thread under a quota of 1, two or more under a quota of 2 (the same
    measure can tell them apart)."""
    import numpy as np
    import tensorflow as tf
    from tfps.cluster.ports import free_ports
    from tfps.ops import embedding_table as et
    address = f"127.0.0.1:{free_ports(1)[0]}"
    with _Quota(cpus) as quota:
        ps = subprocess.Popen([sys.executable, "-c", PS, address], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              preexec_fn=quota.join, env={**os.environ, "PYTHONPATH": ROOT})
        try:
            assert ps.stdout.readline().strip() == "ready"
            keys = np.random.default_rng(0).choice(2**40, 400_000, replace=False).astype(np.int64)
            with tf.Graph().as_default():
                with tf.device("/job:ps/task:0"):
                    handle = et.table_handle(16, "uniform", -0.1, 0.1, seed=1, shared_name="t")
                    ids = tf.constant(keys)
                    find = et.table_find(handle, ids, insert=True)[0, 0]   # TF's own work: one element
                with tf.compat.v1.Session(f"grpc://{address}") as s:
                    s.run(et.table_initialize(handle))
                    s.run(find)
                    before = _ps_thread_cpu(ps.pid)
                    for _ in range(40):
                        s.run(find)
                    after = _ps_thread_cpu(ps.pid)
        finally:
            ps.kill()
            ps.wait()
    spent = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    assert spent[0] > 0, spent
    busy = sum(1 for t in spent if t >= spent[0] / 4)
    assert busy == 1 if cpus == 1 else busy >= 2, spent
