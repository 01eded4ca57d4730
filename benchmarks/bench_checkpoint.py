"""Full vs incremental save of a table of 10^6 rows (dim 16, Adagrad slot) where 1% changed,
measured in one process: a full tf.compat.v1.train.Saver checkpoint vs a delta (the rows
updated since the full save, TfpsTableExportDelta + SaveV2)."""
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

N, DIM, CHANGED = 10**6, 16, 10**4


def size_of(prefix):
    return sum(os.path.getsize(f) for f in tf.io.gfile.glob(prefix + "*"))


def main():
    d = tempfile.mkdtemp(prefix="tfps_ckpt_")
    with tf.Graph().as_default():
        ev = tfps.get_embedding_variable("big", DIM)
        keys = tf.compat.v1.placeholder(tf.int64, [None])
        step = tf.compat.v1.placeholder(tf.int64, [])
        fill = et.table_assign(ev.handles[0], keys, tf.zeros([tf.size(keys), DIM]))
        update = table_apply_adagrad(ev.handles[0], keys, tf.ones([tf.size(keys), DIM]), 0.1, step)
        saver = tf.compat.v1.train.Saver()
        delta = et.table_export_delta(ev.handles[0], step)
        prefix = tf.compat.v1.placeholder(tf.string, [])
        names = [f"big-delta-{p}" for p in ("keys", "values", "slots", "freq", "last_step",
                                            "slot_init", "removed", "complete")]
        save_delta = tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * 8,
                                       tensors=list(delta))
        all_keys = np.arange(N, dtype=np.int64) * 7919
        with session() as s:
            s.run(fill, {keys: all_keys})
            s.run(update, {keys: all_keys, step: 1})       # every row has its slot
            full, inc = [], []
            for r in range(3):
                t = time.perf_counter()
                path = saver.save(s, os.path.join(d, "full"), global_step=r)
                full.append(time.perf_counter() - t)
                changed = np.random.default_rng(r).choice(all_keys, CHANGED, replace=False)
                s.run(update, {keys: changed, step: 10 + r})
                t = time.perf_counter()
                s.run(save_delta, {step: 10 + r, prefix: os.path.join(d, f"delta-{r}")})
                inc.append(time.perf_counter() - t)
            full_bytes, delta_bytes = size_of(path), size_of(os.path.join(d, "delta-2"))
    tf.io.gfile.rmtree(d)
    tf_full, tf_inc = float(np.median(full)), float(np.median(inc))
    report([
        (f"table of {N} rows, dim {DIM}, 1 slot; {CHANGED} rows (1%) changed", ""),
        ("full save (Saver)", f"{tf_full * 1e3:8.1f} ms  {full_bytes / 2**20:7.1f} MiB"),
        ("incremental save (delta)", f"{tf_inc * 1e3:8.1f} ms  {delta_bytes / 2**20:7.1f} MiB"),
        ("RATIO full / incremental", f"{tf_full / tf_inc:.1f}x time, {full_bytes / delta_bytes:.1f}x bytes"),
    ])


if __name__ == "__main__":
    main()
