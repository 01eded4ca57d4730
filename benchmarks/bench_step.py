"""End to end: one DeepFM-shaped training step on tfps tables vs the same step on tf.Variables
with the hashing trick, measured in one process (steps of the two interleaved).

26 features, dim 16 (+1 first-order column), batch 4096, MLP 400-400-400, Adagrad; the
Variable version hashes ids into 2^18 buckets per feature and trains with
tf.compat.v1.train.AdagradOptimizer (sparse updates with duplicate ids summed).
"""
import argparse
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report, session  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402
from tfps.data import SyntheticConfig, SyntheticCriteo  # noqa: E402
from tfps.models.deepfm import deepfm_logits  # noqa: E402

F, DIM, BATCH, HIDDEN, BUCKETS = 26, 16, 4096, [400, 400, 400], 1 << 18


def variable_embedder():
    def embed(ids):
        rows = []
        for f in range(ids.shape[1]):
            table = tf.compat.v1.get_variable(f"C{f + 1}", [BUCKETS, DIM + 1],
                                              initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
            rows.append(tf.nn.embedding_lookup(table, tf.math.floormod(ids[:, f], BUCKETS)))
        return tf.stack(rows, axis=1)
    return embed


def build(use_tfps):
    g = tf.Graph()
    with g.as_default():
        dense = tf.compat.v1.placeholder(tf.float32, [BATCH, 13])
        ids = tf.compat.v1.placeholder(tf.int64, [BATCH, F])
        labels = tf.compat.v1.placeholder(tf.float32, [BATCH])
        logits = deepfm_logits({"dense": dense, "ids": ids}, F, DIM, HIDDEN,
                               embed=None if use_tfps else variable_embedder())
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        gs = tf.compat.v1.train.get_or_create_global_step()
        opt = (tfps.train if use_tfps else tf.compat.v1.train).AdagradOptimizer(0.05)
        train_op = opt.minimize(loss, global_step=gs)
        init = tf.compat.v1.global_variables_initializer()
    sess = session(graph=g)
    sess.run(init)
    return sess, train_op, (dense, ids, labels), len(g.get_operations())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=8)
    args = parser.parse_args()
    gen = SyntheticCriteo(SyntheticConfig())
    batches = [gen.batch(i, BATCH)[:3] for i in range(args.steps + args.warmup)]
    models = {name: build(name == "tfps") for name in ("tfps", "variable")}
    times = {name: [] for name in models}
    for step, batch in enumerate(batches):
        for name, (sess, train_op, phs, _) in models.items():
            feed = dict(zip(phs, batch))
            t = time.perf_counter()
            sess.run(train_op, feed)
            if step >= args.warmup:
                times[name].append(time.perf_counter() - t)
    med = {name: float(np.median(t)) for name, t in times.items()}
    report([
        ("step (26 features, dim 16, batch 4096, MLP 400x3, Adagrad)", ""),
        ("tfps tables step", f"{med['tfps'] * 1e3:.1f} ms  ({BATCH / med['tfps']:.0f} examples/s)"),
        ("tf.Variable hashing-trick step", f"{med['variable'] * 1e3:.1f} ms  ({BATCH / med['variable']:.0f} examples/s)"),
        ("RATIO tfps speed / Variable speed", f"{med['variable'] / med['tfps']:.2f}x  (required >= 0.9, aim >= 1.0)"),
        ("ops in training graph tfps / Variable", f"{models['tfps'][3]} / {models['variable'][3]}"),
    ])


if __name__ == "__main__":
    main()
