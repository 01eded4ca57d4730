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


@needs_two
@pytest.mark.skipif(_cpu_cgroup() is None, reason="needs root and a writable cgroup v1 cpu controller")
def test_a_cpu_quota_of_one_cpu_gives_the_tables_work_one_thread():
    """A PS task under a CPU quota, as a cluster manager sets one: the session's pool is the
    machine's (TensorFlow does not read the quota), the table's work is the quota's."""
    group = os.path.join(_cpu_cgroup(), f"tfps-test-{os.getpid()}")
    os.mkdir(group)
    try:
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
            f.write("100000")
        procs = os.path.join(group, "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        busy, spent = _busy(preexec=join)
        assert busy == 1, spent
    finally:
        os.rmdir(group)
