"""Embedding part of the 26-feature demo model: merged vs unmerged tables, one process.

Per step: look up 26 features of a batch of 4096 (dim 16 + 1), a loss on the rows, the
Adagrad update of the tables. merged: the 26 features share one table, one fused
deduplicated lookup; unmerged: a table and a lookup per feature. Also the number of ops in
each training graph and the ids probed per step with and without cross-feature (stage 2)
deduplication on the demo data.
"""
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report, session  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402
from tfps.data import SyntheticConfig, SyntheticCriteo  # noqa: E402
from tfps.models.deepfm import feature_embedder  # noqa: E402

F, DIM, BATCH, STEPS, WARMUP = 26, 16, 4096, 25, 5


def build(merge, stats=None):
    g = tf.Graph()
    with g.as_default():
        ids = tf.compat.v1.placeholder(tf.int64, [BATCH, F])
        rows = feature_embedder(DIM, merge=merge, stats=stats)(ids)      # [B, F, D+1]
        weights = tf.constant(np.random.default_rng(0).normal(size=(F, DIM + 1)).astype(np.float32))
        loss = tf.reduce_mean(tf.square(tf.reduce_sum(rows * weights, [1, 2])))
        train = tfps.train.AdagradOptimizer(0.05).minimize(loss)
        n_ops = len(g.get_operations())
    return session(graph=g), train, ids, stats, n_ops


def main():
    gen = SyntheticCriteo(SyntheticConfig())
    batches = [gen.batch(i, BATCH)[1] for i in range(STEPS + WARMUP)]
    models = {"merged": build(True), "unmerged": build(False)}
    times = {k: [] for k in models}
    ids_sent = {}
    for step, batch in enumerate(batches):
        for name in (["merged", "unmerged"] if step % 2 else ["unmerged", "merged"]):
            sess, train, ids, stats, _ = models[name]
            t = time.perf_counter()
            sess.run(train, {ids: batch})
            if step >= WARMUP:
                times[name].append(time.perf_counter() - t)
    stats = {}
    sess, _, ids, _, _ = build(True, stats)  # counting ops in a graph of their own
    ids_sent = np.mean([sess.run([stats["ids_stage1"], stats["ids_stage2"]], {ids: b}) for b in batches[:10]], 0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    report([
        ("embedding part, 26 features, batch 4096, dim 17, Adagrad", ""),
        ("merged tables step", f"{med['merged'] * 1e3:.1f} ms"),
        ("unmerged tables step", f"{med['unmerged'] * 1e3:.1f} ms"),
        ("RATIO merged speed / unmerged", f"{med['unmerged'] / med['merged']:.2f}x  (aim >= 1.5)"),
        ("ops in training graph merged / unmerged", f"{models['merged'][4]} / {models['unmerged'][4]}"),
        ("ids raw per step", f"{BATCH * F}"),
        ("ids probed per step, stage 1 only (per-feature dedup)", f"{ids_sent[0]:.0f}"),
        ("ids probed per step, stage 1 + 2 (cross-feature dedup)", f"{ids_sent[1]:.0f}"),
    ])


if __name__ == "__main__":
    main()
