"""tfps.train.fused on an in-process cluster (real gRPC on loopback): dense variables read and
pushed as one tensor per PS train exactly as unfused, with the same checkpoint names.

Oracle: the same model trained unfused, step by step, in the same cluster."""
import numpy as np
import tensorflow as tf

import tfps
from tfps.models.common import dense_layer
from tfps.cluster.launch import cluster_spec
from tfps.cluster.placement import replica_device_setter
from tfps.runner import rpc_stats
from tfps.embedding.model_graph import TrainingStep
from tfps.train.fused import FusedDense
from tfps.train.push import FusedPush, PlainPush

STEPS, BATCH = 6, 32
START = 100   # the global step the session starts at


def _train(spec, target, fused, optimizer):
    tf.compat.v1.Session.reset(target)   # the tables live on the PS servers: start each run from nothing
    rng = np.random.default_rng(0)
    with tf.Graph().as_default() as graph:
        with tf.compat.v1.device(replica_device_setter(cluster=spec, worker_device="/job:chief/task:0")):
            gs = tf.compat.v1.train.get_or_create_global_step()
            ids = tf.compat.v1.placeholder(tf.int64, [BATCH, 3])
            x = tf.compat.v1.placeholder(tf.float32, [BATCH, 4])
            # the step passed explicitly (no graph default): its push policy carries the gradients
            step = TrainingStep(push=FusedPush(FusedDense(anchor=ids.op)) if fused else None)
            # the model built in the push policy's dense scope (PlainPush's: a null context)
            with (step.push or PlainPush()).dense_scope():
                ev = tfps.get_embedding_variable("e", 4, num_shards=2)
                rows = tf.reshape(tfps.embedding_lookup(ev, ids, step=step), [BATCH, 12])
                h = dense_layer(tf.concat([rows, x], 1), 8, "h", activation=tf.nn.relu,
                                kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=1),
                                kernel_regularizer=lambda w: 0.01 * tf.reduce_sum(tf.square(w)))
                logit = dense_layer(h, 1, "out", kernel_initializer=tf.compat.v1.glorot_uniform_initializer(seed=2))
                loss = tf.reduce_mean(tf.square(logit)) + tf.add_n(tf.compat.v1.losses.get_regularization_losses())
                train_op = optimizer().minimize(loss, global_step=gs, step=step)
            assert not TrainingStep.of(graph).lookups   # nothing went through the graph's own step
            names = sorted(v.op.name for v in tf.compat.v1.global_variables())
        dense = [v for v in tf.compat.v1.trainable_variables()]
        # Every op made before the session runs: one made after can change an op the session ran
        # (a control dependency on an initializer).
        from tensorflow.python.ops import resources
        init = [tf.compat.v1.global_variables_initializer(),
                resources.initialize_resources(resources.shared_resources()),
                gs.assign(START),   # as after a restore: the worker's step stamp starts from it
                tf.compat.v1.local_variables_initializer()]
        export = ev.export()
        with tf.compat.v1.Session(target, graph=graph) as s:
            for op in init:
                s.run(op)
            for _ in range(STEPS):
                s.run(train_op, {ids: rng.integers(0, 50, [BATCH, 3]), x: rng.normal(size=[BATCH, 4])})
            meta = tf.compat.v1.RunMetadata()
            s.run(train_op, {ids: rng.integers(0, 50, [BATCH, 3]), x: rng.normal(size=[BATCH, 4])},
                  options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                                  output_partition_graphs=True), run_metadata=meta)
            values = {v.op.name: s.run(v) for v in dense}
            table = s.run(export)
        copies = step.push.fused.copies if fused else {}
    order = np.argsort(table["keys"])
    return names, values, (table["values"][order], table["last_step"][order]), rpc_stats(meta), len(copies)


def test_fused_dense_traffic_trains_exactly_as_unfused_with_the_same_names():
    spec = tf.train.ClusterSpec(cluster_spec(2, 1))
    servers = [tf.distribute.Server(spec, job_name="ps", task_index=i) for i in range(2)]
    chief = tf.distribute.Server(spec, job_name="chief", task_index=0)
    for optimizer in (lambda: tfps.train.AdagradOptimizer(0.1), lambda: tfps.train.AdamOptimizer(0.01)):
        names, values, table, plain_stats, _ = _train(spec, chief.target, False, optimizer)
        f_names, f_values, f_table, fused_stats, copies = _train(spec, chief.target, True, optimizer)
        assert copies == 4                       # h/kernel, h/bias, out/kernel, out/bias
        assert f_names == names                   # checkpoints hold the same variables
        assert f_values.keys() == values.keys()
        for name in values:
            np.testing.assert_array_equal(f_values[name], values[name], err_msg=name)
        np.testing.assert_array_equal(f_table[0], table[0])
        # rows are stamped with the step that updated them (eviction, deltas): the fused step's
        # worker-kept stamp is the global step's, as the unfused step's read of it
        np.testing.assert_array_equal(f_table[1], table[1])
        assert table[1].max() == START + STEPS
        # counted from the partition graphs: the trace of a remote task can miss a RecvTensor
        assert fused_stats["messages"] < plain_stats["messages"]
    del servers


def test_pack_and_unpack_carry_every_gradient_key_and_stamp_to_its_ps():
    """Several table shards on one PS, a PS with dense variables only, a dense gradient whose
    static shape is partly unknown, a shard with no rows: each value arrives where its variable
    lives, unchanged. Oracle: the values fed."""
    import types
    spec = tf.train.ClusterSpec(cluster_spec(2, 1))
    servers = [tf.distribute.Server(spec, job_name="ps", task_index=i) for i in range(2)]
    chief = tf.distribute.Server(spec, job_name="chief", task_index=0)
    rng = np.random.default_rng(1)
    feeds, want = {}, {}
    with tf.Graph().as_default() as graph:
        with tf.compat.v1.device("/job:chief/task:0"):
            anchor = tf.no_op()
        fused = FusedDense(anchor=anchor)
        with tf.compat.v1.device("/job:ps/task:0"):
            w0 = tf.Variable(tf.zeros([3, 4]), name="w0")
            handle = tf.Variable(0, name="table_stand_in")   # stands for a table shard's handle
        with tf.compat.v1.device("/job:ps/task:1"):
            w1 = tf.Variable(tf.zeros([5]), name="w1")
        with tf.compat.v1.device("/job:chief/task:0"):
            g0 = tf.compat.v1.placeholder(tf.float32, [None, 4])       # the static shape is partly unknown
            g1 = tf.compat.v1.placeholder(tf.float32, [5])
            feeds[g0], feeds[g1] = rng.normal(size=[3, 4]), rng.normal(size=[5])
            tables = []
            for rows in (4, 0, 2):                                     # three shards on ps 0, one empty
                values = tf.compat.v1.placeholder(tf.float32, [None, 2])
                keys = tf.compat.v1.placeholder(tf.int64, [None])
                feeds[values], feeds[keys] = rng.normal(size=[rows, 2]), rng.integers(0, 10**12, size=rows)
                tables.append((tf.IndexedSlices(values, keys), types.SimpleNamespace(handle=handle)))
            tensors, packing = fused.pack([(g0, w0), (g1, w1)], tables, tf.constant(7, tf.int64))
        dense, out_tables, stamps = FusedDense.unpack(tensors, packing)
        assert [v for _, v in dense] == [w0, w1] and dense[0][0].shape == w0.shape
        assert dense[0][0].device.endswith("ps/task:0") and dense[1][0].device.endswith("ps/task:1")
        assert all(t[0].values.device.endswith("ps/task:0") for t in out_tables)
        assert len(tensors) == 3             # ps 0: keys and float32 values; ps 1: float32 values
        with tf.compat.v1.Session(chief.target, graph=graph) as s:
            got = s.run([[g for g, _ in dense], [(t.values, t.indices) for t, _ in out_tables], stamps], feeds)
    np.testing.assert_array_equal(got[0][0], feeds[g0].astype(np.float32))
    np.testing.assert_array_equal(got[0][1], feeds[g1].astype(np.float32))
    for (values, keys), (slices, _) in zip(got[1], tables):
        np.testing.assert_array_equal(values, feeds[slices.values].astype(np.float32))
        np.testing.assert_array_equal(keys, feeds[slices.indices])
    assert got[2] == [7, 7, 7]
    del servers
