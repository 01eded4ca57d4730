"""Two figures of a model's state.

Default: full checkpoint vs delta of a model with a table of 10^6 rows (dim 16, Adagrad slot), 1% of
them changed, and the demo's MLP (26 x 8 embeddings + 13 dense -> 256 -> 128 -> 64 -> 1, with its
Adagrad slots), in one process: a full tfps.state.StateSaver checkpoint vs the delta
IncrementalCheckpoints writes (the changed rows, the admission sketch, every dense variable and
the global step: tfps.state.deltas.save_op). Same run, same session.

--ps 1,2,4 [--rows N]: a table of N rows (dim 32, keys and values) sharded over that many PS
tasks, saved by a sharded Saver and restored into as many (and saved over 3, restored into 4):
wall time, MB/s, and each PS's peak memory growth over its own shard, with every row checked;
beside a partitioned tf.Variable of the same bytes saved and restored by TF's own Saver (the
floor), in the same run (benchmarks/ps_state.py)."""
import json
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report, session  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402
from tfps.ops import embedding_table as et  # noqa: E402
from tfps.ops.training import table_apply_adagrad  # noqa: E402
from tfps.state import deltas, manifest as manifests  # noqa: E402
from tfps.state.saver import StateSaver  # noqa: E402

N, DIM, CHANGED = 10**6, 16, 10**4
FEATURES, EMB, NUM_DENSE, HIDDEN = 26, 8, 13, (256, 128, 64)


def size_of(prefix):
    return sum(os.path.getsize(f) for f in tf.io.gfile.glob(prefix + ".*"))


def main():
    d = tempfile.mkdtemp(prefix="tfps_ckpt_")
    with tf.Graph().as_default() as graph:
        gs = tf.compat.v1.train.get_or_create_global_step()
        ev = tfps.get_embedding_variable("big", DIM)
        x = tf.random.normal([4, FEATURES * EMB + NUM_DENSE])   # the demo MLP's input width
        for i, units in enumerate(HIDDEN + (1,)):
            w = tf.compat.v1.get_variable(f"mlp/dense_{i}/kernel", [x.shape[1], units])
            b = tf.compat.v1.get_variable(f"mlp/dense_{i}/bias", [units], initializer=tf.zeros_initializer())
            x = tf.matmul(x, w) + b
        train = tfps.train.AdagradOptimizer(0.1).minimize(tf.reduce_sum(x), global_step=gs)
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        step = tf.compat.v1.placeholder(tf.int64, [])
        fill = et.table_assign(ev.handles[0], keys, tf.zeros([tf.size(keys), DIM]))
        update = table_apply_adagrad(ev.handles[0], keys, tf.ones([tf.size(keys), DIM]), 0.1, step)
        saver = StateSaver(sharded=True, max_to_keep=None)
        saver.build()
        prefix = tf.compat.v1.placeholder(tf.string, [])
        dense = manifests.dense_variables(graph)
        save_delta, _ = deltas.save_op([ev], dense, manifests.manifest(manifests.describe(graph), "delta"),
                                       step, step, prefix)
        all_keys = np.arange(N, dtype=np.int64) * 7919
        with session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(tf.compat.v1.local_variables_initializer())
            s.run(fill, {keys: all_keys})
            s.run(update, {keys: all_keys, step: 1})       # every row has its slot
            s.run(train)
            full, inc = [], []
            for r in range(5):
                t = time.perf_counter()
                path = saver.save(s, os.path.join(d, "full"), global_step=r)
                full.append(time.perf_counter() - t)
                changed = np.random.default_rng(r).choice(all_keys, CHANGED, replace=False)
                s.run(update, {keys: changed, step: 10 + r})
                s.run(train)
                t = time.perf_counter()
                s.run(save_delta, {step: 10 + r, prefix: os.path.join(d, f"delta-{r}")})
                inc.append(time.perf_counter() - t)
            full_bytes, delta_bytes = size_of(path), size_of(os.path.join(d, "delta-4"))
            dense_bytes = sum(v.shape.num_elements() * 4 for v in dense.values())
    tf.io.gfile.rmtree(d)
    tf_full, tf_inc = float(np.median(full)), float(np.median(inc))
    report([
        (f"table of {N} rows, dim {DIM}, 1 slot; {CHANGED} rows (1%) changed; demo MLP "
         f"({dense_bytes / 2**20:.2f} MiB of dense state with slots)", ""),
        ("full checkpoint (StateSaver)", f"{tf_full * 1e3:8.1f} ms  {full_bytes / 2**20:7.1f} MiB"),
        ("delta (rows + dense + step)", f"{tf_inc * 1e3:8.1f} ms  {delta_bytes / 2**20:7.1f} MiB"),
        ("RATIO full / delta", f"{tf_full / tf_inc:.1f}x time, {full_bytes / delta_bytes:.1f}x bytes"),
    ])


def main_ps(ps_counts, rows):
    import ps_state
    runs, floors = ps_state.run(rows, ps_counts)
    mib = 2**20
    lines = [(f"table of {rows} rows x {ps_state.DIM} (keys and values), sharded Saver; growth = a PS's peak RSS "
              f"growth / its shard's bytes", "")]
    floor_of = {f["ps"]: f for f in floors}
    for r in runs:
        save_ratio = [g / b for g, b in zip(r["save_growth"], r["save_shard_bytes"])]
        restore_ratio = [g / b for g, b in zip(r["restore_growth"], r["restore_shard_bytes"])]
        mb = r["checkpoint_bytes"] / mib
        lines.append((f"{r['save_ps']} PS -> {r['restore_ps']} PS: save",
                      f"{r['save_s']:6.2f} s {mb / r['save_s']:7.1f} MB/s  growth max {max(save_ratio):.2f}x "
                      f"({', '.join(f'{x:.2f}' for x in save_ratio)})"))
        lines.append((f"{r['save_ps']} PS -> {r['restore_ps']} PS: restore",
                      f"{r['restore_s']:6.2f} s {mb / r['restore_s']:7.1f} MB/s  growth max {max(restore_ratio):.2f}x "
                      f"({', '.join(f'{x:.2f}' for x in restore_ratio)}); rows exact: {r['exact']}"))
        floor = floor_of.get(r["save_ps"]) if r["save_ps"] == r["restore_ps"] else None
        if floor is not None:
            fmb = floor["checkpoint_bytes"] / mib
            lines.append((f"  floor: tf.Variable over {floor['ps']} PS, TF's Saver",
                          f"save {floor['save_s']:6.2f} s {fmb / floor['save_s']:7.1f} MB/s, restore "
                          f"{floor['restore_s']:6.2f} s {fmb / floor['restore_s']:7.1f} MB/s"))
            lines.append((f"  RATIO tfps / floor ({floor['ps']} PS)",
                          f"save {r['save_s'] / floor['save_s']:.2f}x, restore {r['restore_s'] / floor['restore_s']:.2f}x "
                          f"the time"))
    report(lines)
    print(json.dumps({"rows": rows, "runs": runs, "floors": floors}))
    if not all(r["exact"] for r in runs):
        raise SystemExit("rows differ after a restore")


if __name__ == "__main__":
    if "--ps" in sys.argv:
        args = sys.argv[1:]
        counts = [int(x) for x in args[args.index("--ps") + 1].split(",")]
        n = int(args[args.index("--rows") + 1]) if "--rows" in args else 3 * 10**6
        main_ps(counts, n)
    else:
        main()
