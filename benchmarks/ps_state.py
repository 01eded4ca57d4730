"""Save and restore of a table sharded over PS tasks (`tf.distribute.Server` processes of their
own), each PS's peak memory growth measured over its own shard, beside a partitioned
tf.Variable of the same bytes saved by TF's own sharded Saver (the floor). bench_checkpoint
--ps runs it."""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

import tfps
from tfps.ops import embedding_table as et

DIM = 32
CHUNK = 500_000


def _status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class Peaks:
    """Each process's peak RSS growth over a block: VmHWM after it, less VmRSS before it (the peak
    is reset by /proc/PID/clear_refs, so it is the block's own)."""

    def __init__(self, pids):
        self.pids = pids

    def __enter__(self):
        for pid in self.pids:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        self.base = [_status(pid, "VmRSS") for pid in self.pids]
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.start
        self.growth = [_status(pid, "VmHWM") - b for pid, b in zip(self.pids, self.base)]


class Cluster:
    """n PS tasks and the client's own server (job "client"), on free local ports."""

    def __init__(self, n):
        from tfps.cluster.ports import free_ports
        ports = free_ports(n + 1)
        self.spec = {"ps": [f"localhost:{p}" for p in ports[:n]], "client": [f"localhost:{ports[n]}"]}
        code = ("import sys, json, tensorflow as tf, tfps.ops; s = json.loads(sys.argv[1]); "
                "tf.distribute.Server(tf.train.ClusterSpec(s), job_name='ps', task_index=int(sys.argv[2])).join()")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.ps = [subprocess.Popen([sys.executable, "-c", code, json.dumps(self.spec), str(i)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(n)]
        self.server = tf.distribute.Server(tf.train.ClusterSpec(self.spec), job_name="client", task_index=0)

    def close(self):
        for p in self.ps:
            p.kill()
            p.wait()


def _place(op):
    """Shard i of a table on PS task i (the ops on a shard follow it there); the rest on the client."""
    if op.type == "TfpsTableHandle":
        return f"/job:ps/task:{op.get_attr('shard')}"
    return ""


def values_of(keys):
    return (keys[:, None].astype(np.float64) * 1e-3 + np.arange(DIM)).astype(np.float32)


def _table_graph(shards):
    graph = tf.Graph()
    with graph.as_default(), graph.device(_place):
        ev = tfps.get_embedding_variable("big", DIM, num_shards=shards)
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        values = tf.compat.v1.placeholder(tf.float32, [None, DIM])
        assign = [et.table_assign(h, keys, values) for h in ev.handles]
        stats = [et.table_memory_stats(h) for h in ev.handles]
        saver = tf.compat.v1.train.Saver(sharded=True)
        init = tf.compat.v1.global_variables_initializer()
    return graph, ev, keys, values, assign, stats, saver, init


def _shard_bytes(sess, stats):
    return [int(s[2]) for s in sess.run(stats)]   # bytes_in_use: index, rows (keys, values, slots, meta), sketch


def table_run(rows, save_ps, restore_ps, directory):
    """Saves a table of `rows` rows over save_ps PS tasks and restores it into restore_ps; checks
    every row; returns the figures."""
    prefix = os.path.join(directory, f"table-{save_ps}")
    out = {"rows": rows, "save_ps": save_ps, "restore_ps": restore_ps}
    cluster = Cluster(save_ps)
    try:
        graph, ev, keys, values, assign, stats, saver, init = _table_graph(save_ps)
        with tf.compat.v1.Session(cluster.server.target, graph=graph) as sess:
            sess.run(init)
            for i in range(save_ps):
                own = np.arange(i, rows, save_ps, dtype=np.int64)
                for at in range(0, len(own), CHUNK):
                    k = own[at:at + CHUNK]
                    sess.run(assign[i], {keys: k, values: values_of(k)})
            shard = _shard_bytes(sess, stats)
            sess.run(assign[0], {keys: np.zeros([0], np.int64), values: np.zeros([0, DIM], np.float32)})
            with Peaks([p.pid for p in cluster.ps]) as peaks:
                path = saver.save(sess, prefix)
        out.update(save_s=peaks.wall, save_shard_bytes=shard, save_growth=peaks.growth,
                   checkpoint_bytes=sum(os.path.getsize(f) for f in tf.io.gfile.glob(path + "*")))
    finally:
        cluster.close()
    cluster = Cluster(restore_ps)
    try:
        graph, ev, keys, values, assign, stats, saver, init = _table_graph(restore_ps)
        with graph.as_default():
            exports = [et.table_export(h)[:2] for h in ev.handles]
        with tf.compat.v1.Session(cluster.server.target, graph=graph) as sess:
            sess.run(init)
            with Peaks([p.pid for p in cluster.ps]) as peaks:
                saver.restore(sess, path)
            shard = _shard_bytes(sess, stats)
            exact, total = True, 0
            for j, export in enumerate(exports):   # every row, shard by shard
                k, v = sess.run(export)
                total += len(k)
                exact &= bool(np.all(k % restore_ps == j)) and np.array_equal(v, values_of(k))
            exact &= total == rows
        out.update(restore_s=peaks.wall, restore_shard_bytes=shard, restore_growth=peaks.growth, exact=exact)
    finally:
        cluster.close()
    return out


def floor_run(rows, ps, directory):
    """A tf.Variable [rows, DIM + 2] float32 (the table's keys and values bytes), partitioned over
    the PS tasks, saved and restored by TF's sharded Saver."""
    cluster = Cluster(ps)
    prefix = os.path.join(directory, f"floor-{ps}")
    try:
        graph = tf.Graph()
        with graph.as_default():
            with graph.device(tf.compat.v1.train.replica_device_setter(ps_tasks=ps, worker_device="/job:client/task:0")):
                var = tf.compat.v1.get_variable("floor", [rows, DIM + 2], tf.float32,
                                                initializer=tf.compat.v1.random_uniform_initializer(),
                                                partitioner=tf.compat.v1.fixed_size_partitioner(ps))
            saver = tf.compat.v1.train.Saver(sharded=True)
            init = tf.compat.v1.global_variables_initializer()
        del var
        with tf.compat.v1.Session(cluster.server.target, graph=graph) as sess:
            sess.run(init)
            with Peaks([p.pid for p in cluster.ps]) as save:
                path = saver.save(sess, prefix)
            with Peaks([p.pid for p in cluster.ps]) as restore:
                saver.restore(sess, path)
        size = sum(os.path.getsize(f) for f in tf.io.gfile.glob(path + "*"))
        return {"ps": ps, "save_s": save.wall, "restore_s": restore.wall, "checkpoint_bytes": size,
                "save_growth": save.growth, "restore_growth": restore.growth}
    finally:
        cluster.close()


def run(rows, ps_counts, reshard=(3, 4)):
    d = tempfile.mkdtemp(prefix="tfps_ps_state_")
    try:
        runs = [table_run(rows, n, n, d) for n in ps_counts]
        if reshard:
            runs.append(table_run(rows, reshard[0], reshard[1], d))
        floors = [floor_run(rows, n, d) for n in ps_counts]
    finally:
        tf.io.gfile.rmtree(d)
    return runs, floors
