"""Online learning: bytes per live key over a 200-step run where ids churn, with and without
eviction (evict_after_steps=20, EvictionHook every 10 steps). Each step: batch of 4096 ids,
half from a fixed popular set, half never seen before."""
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402

STEPS, BATCH, DIM = 200, 4096, 16


def run(evict):
    with tf.Graph().as_default():
        opts = tfps.EmbeddingOptions(evict_after_steps=20) if evict else tfps.EmbeddingOptions()
        ev = tfps.get_embedding_variable("online", DIM, options=opts)
        gs = tf.compat.v1.train.get_or_create_global_step()
        step = tf.cast(gs, tf.int64)
        popular = tf.random.uniform([BATCH // 2], 0, 5000, dtype=tf.int64, seed=1)
        fresh = 10**9 + step * BATCH + tf.range(BATCH // 2, dtype=tf.int64)
        ids = tf.concat([popular, fresh], 0)
        loss = tf.reduce_sum(tf.square(tfps.embedding_lookup(ev, ids)))
        train = tfps.train.AdagradOptimizer(0.05).minimize(loss, global_step=gs)
        stats = ev.memory_stats()
        hooks = [tfps.runner.EvictionHook(10, printer=lambda *a, **k: None)] if evict else []
        samples = []
        with tf.compat.v1.train.MonitoredSession(hooks=hooks) as s:
            for t in range(STEPS):
                s.run(train)
                if (t + 1) % 50 == 0:
                    st = s.run(stats)
                    samples.append((t + 1, st["rows"], st["bytes_reserved"]))
        return samples, st["row_bytes"]


def main():
    rows = [("200 steps, 4096 ids/step (half new each step), dim 16, Adagrad (1 slot)", "")]
    for evict in (False, True):
        samples, row_bytes = run(evict)
        label = "with eviction (after 20 steps)" if evict else "without eviction"
        for step, n, reserved in samples:
            rows.append((f"  {label}, step {step}", f"{n:8d} keys  {reserved / n:6.1f} B/key  "
                                                    f"{reserved / 2**20:7.1f} MiB"))
    rows.append(("ideal bytes/key (8 + 4*dim*(1+slots))", f"{8 + 4 * DIM * 2}"))
    report(rows)


if __name__ == "__main__":
    main()
