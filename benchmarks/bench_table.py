"""Hash-table embedding vs TF built-ins, measured in one process.

Batch of 1,048,576 Zipf(1.2) ids (~140k unique), dim 16, 2 threads:
  warm lookup:  tfps.embedding_lookup (dedup, one probe per distinct id, gather back; the
                training path, find-or-insert) vs tf.lookup.experimental.DenseHashTable.lookup
                vs tf.gather on a tf.Variable of 2^20 rows (hashing trick: ids mod 2^20)
  insert:       batches of 2^18 never-seen keys with their rows into a growing table
                (TfpsTableAssign) vs DenseHashTable.insert of the same keys and rows; also
                find-or-insert of the same keys, rows from the initializer (TfpsTableFind)
  memory:       bytes per key (row arena pages + index) vs the ideal 8 + 4*dim*(1+slots)
"""
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report, session, time_interleaved, zipf_ids  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402
from tfps.ops import embedding_table as et  # noqa: E402

N, DIM, VOCAB = 1 << 20, 16, 1 << 20
INSERT_BATCH, INSERT_ROUNDS = 1 << 18, 17


def main():
    ids_np = zipf_ids(N)
    uniq_np = np.unique(ids_np)
    fresh_np = np.random.default_rng(1).permutation(np.arange(N, dtype=np.int64) * 7919 + 13)
    rows = []
    with tf.Graph().as_default():
        ids = tf.constant(ids_np)
        # tfps
        ev = tfps.get_embedding_variable("bench", DIM)
        ours = tfps.embedding_lookup(ev, ids)
        ours_serving = tfps.embedding_lookup(ev, ids, insert=False)
        # DenseHashTable
        dht = tf.lookup.experimental.DenseHashTable(tf.int64, tf.float32, default_value=tf.zeros([DIM]),
                                                    empty_key=-1, deleted_key=-2)
        dht_fill = dht.insert(tf.constant(uniq_np), tf.zeros([len(uniq_np), DIM]))
        dht_lookup = dht.lookup(ids)
        # Variable gather, hashing trick
        var = tf.compat.v1.get_variable("var", [VOCAB, DIM])
        var_gather = tf.gather(var, tf.math.floormod(ids, VOCAB))
        # Inserts: each run brings 2^20 keys never seen before (fed), into one growing table.
        new_keys = tf.compat.v1.placeholder(tf.int64, [INSERT_BATCH])
        rows_var = tf.compat.v1.get_variable("rows", [INSERT_BATCH, DIM],
                                             initializer=tf.compat.v1.zeros_initializer(), trainable=False)
        h_assign = et.table_handle(DIM, "truncated_normal", 0, 0.1, shared_name="assign")
        h_find = et.table_handle(DIM, "truncated_normal", 0, 0.1, shared_name="find")
        ins_assign = et.table_assign(h_assign, new_keys, rows_var)
        ins_find = et.table_find(h_find, new_keys).op
        dht_new = tf.lookup.experimental.DenseHashTable(tf.int64, tf.float32, default_value=tf.zeros([DIM]),
                                                        empty_key=-1, deleted_key=-2)
        ins_dht = dht_new.insert(new_keys, rows_var)
        with session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run([ours.op, dht_fill])
            stats = s.run(ev.memory_stats())
            t_ours, t_serv, t_dht, t_var = time_interleaved(s, [ours.op, ours_serving.op, dht_lookup.op,
                                                                 var_gather.op])

            def inserts(ops):
                """Seconds per 2^18 new keys for each op, over rounds 2..INSERT_ROUNDS (the tables
                grow to 4.5M keys; growth included). Each round feeds the same new keys to every
                op, interleaved, so all tables grow under the same memory conditions."""
                total = [0.0] * len(ops)
                for r in range(INSERT_ROUNDS):
                    feed = {new_keys: np.arange(INSERT_BATCH, dtype=np.int64) * 7919 + 13 + r * (1 << 40)}
                    for k, op in enumerate(ops):
                        t = time.perf_counter()
                        s.run(op, feed)
                        if r:
                            total[k] += time.perf_counter() - t
                return [t / (INSERT_ROUNDS - 1) for t in total]
            t_ins_dht, t_ins_ours, t_ins_find = inserts([ins_dht, ins_assign, ins_find])
            ins_stats = s.run(et.table_memory_stats(h_assign))
    mids = lambda t, n=N: f"{n / t / 1e6:6.1f} M ids/s"  # noqa: E731
    ideal = 8 + 4 * DIM
    rows += [
        ("unique ids in batch", f"{len(uniq_np)}"),
        ("warm lookup tfps (train path)", mids(t_ours)),
        ("warm lookup tfps (serving, no insert)", mids(t_serv)),
        ("warm lookup DenseHashTable", mids(t_dht)),
        ("tf.gather on Variable (hashing trick)", mids(t_var)),
        ("RATIO lookup tfps / DenseHashTable", f"{t_dht / t_ours:.2f}x  (required >= 2)"),
        ("RATIO lookup tfps / Variable gather", f"{t_var / t_ours:.2f}x  (required >= 0.6, aim 0.9)"),
        ("insert new keys tfps (assign rows)", mids(t_ins_ours, INSERT_BATCH)),
        ("insert new keys DenseHashTable (insert rows)", mids(t_ins_dht, INSERT_BATCH)),
        ("RATIO insert tfps / DenseHashTable", f"{t_ins_dht / t_ins_ours:.2f}x  (required >= 2)"),
        ("find-or-insert new keys tfps (rows from initializer)", mids(t_ins_find, INSERT_BATCH)),
        ("bytes/key at 140k keys (reserved)", f"{stats['bytes_reserved'] / stats['rows']:.1f} "
                                              f"(ideal {ideal}, bound {1.3 * ideal + 32:.1f})"),
        (f"bytes/key at {ins_stats[0] / 1e6:.1f}M keys (reserved)",
         f"{ins_stats[1] / ins_stats[0]:.1f} (ideal {ideal}, bound 1.3*ideal+32 = {1.3 * ideal + 32:.1f})"),
    ]
    report(rows)


if __name__ == "__main__":
    main()
