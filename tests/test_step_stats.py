"""rpc_stats: cross-task traffic of a traced step, on an in-process cluster (real gRPC on loopback).

Oracle: the sizes of the tensors that must cross tasks in the graph below."""
import numpy as np
import tensorflow as tf

import tfps
from tfps.cluster.launch import cluster_spec
from tfps.runner import rpc_stats
from tfps.runner.step_trace import messages_by_task

N, DIM = 1000, 8


def test_traffic_of_a_traced_step_matches_the_tensors_that_cross_tasks():
    spec = tf.train.ClusterSpec(cluster_spec(2, 1))
    servers = [tf.distribute.Server(spec, job_name="ps", task_index=i) for i in range(2)]
    chief = tf.distribute.Server(spec, job_name="chief", task_index=0)
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            w = tf.compat.v1.get_variable("w", [DIM, 1])
        with tf.device("/job:ps/task:1"):
            ev = tfps.get_embedding_variable("e", DIM)
        with tf.device("/job:chief/task:0"):
            ids = tf.constant(np.arange(N), tf.int64)   # N distinct ids
            loss = tf.reduce_sum(tf.matmul(tfps.embedding_lookup(ev, ids), w))
            train_op = tfps.train.AdagradOptimizer(0.1).minimize(loss)
        with tf.compat.v1.Session(chief.target) as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(train_op)
            # Eight traced steps, the fullest counted: on a loaded machine a remote partition's
            # step stats sometimes lack a RecvTensor entry (seen under 2 busy-looping cores, and in
            # all of three traces with `make test`'s three pytest workers on 2 cores).
            traces = []
            for _ in range(8):
                meta = tf.compat.v1.RunMetadata()
                s.run(train_op, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                                                output_partition_graphs=True),
                      run_metadata=meta)
                traces.append((rpc_stats(meta), meta))
    stats, meta = max(traces, key=lambda t: t[0]["bytes"])
    assert stats["tasks"] == 3
    # From the PS: the N looked-up rows (float32) and w. To the PS: the N ids (int64), the N
    # row gradients, w's gradient.
    assert stats["bytes_from_ps"] >= N * DIM * 4 + DIM * 4
    assert stats["bytes_to_ps"] >= N * 8 + N * DIM * 4 + DIM * 4, (stats, [(d.device, len(d.node_stats)) for d in meta.step_stats.dev_stats])
    assert stats["bytes"] == stats["bytes_from_ps"] + stats["bytes_to_ps"]
    # Nothing much else crosses: the transfers above plus small bookkeeping tensors.
    assert stats["bytes"] < 1.2 * (N * 8 + 2 * N * DIM * 4 + 2 * DIM * 4) + 8 * N
    assert stats["recv_tensor_rpcs"] >= 5
    # The partitions' count of cross-task tensors: at least the five transfers above, and the
    # trace never holds more RecvTensor entries than it.
    assert stats["messages"] >= 5
    assert all(t["recv_tensor_rpcs"] <= t["messages"] for t, _ in traces)
    # Per task: every tensor one task sends, another receives. The chief sends at least the ids,
    # the row gradients and w's gradient, and receives at least the rows and w.
    by_task = messages_by_task(meta.partition_graphs)
    assert set(by_task) == {"chief0", "ps0", "ps1"}
    assert sum(c["sent"] for c in by_task.values()) == sum(c["received"] for c in by_task.values()) == stats["messages"]
    assert by_task["chief0"]["sent"] >= 3 and by_task["chief0"]["received"] >= 2
    assert all(by_task[ps]["sent"] and by_task[ps]["received"] for ps in ("ps0", "ps1"))
    del servers
