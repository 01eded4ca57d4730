"""Shared helpers of the benchmarks: timing in one session, Zipf ids."""
import os
import time

import numpy as np
import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def session(threads=2, graph=None):
    return tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads))


def time_op(sess, target, feed=None, repeats=7, warmup=2):
    """Median seconds of sess.run(target) over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        sess.run(target, feed)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        sess.run(target, feed)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def time_interleaved(sess, targets, feed=None, repeats=15, warmup=2):
    """Median seconds of each target. Every round runs all targets in a fresh random order, so
    that load on the shared machine and the cache state left by the previous op (a 64 MB
    gather evicts everything) hit all of them alike."""
    rng = np.random.default_rng(0)
    times = [[] for _ in targets]
    for r in range(warmup + repeats):
        for i in rng.permutation(len(targets)):
            t = time.perf_counter()
            sess.run(targets[i], feed)
            if r >= warmup:
                times[i].append(time.perf_counter() - t)
    return [float(np.median(t)) for t in times]


def zipf_ids(n, a=1.2, seed=0):
    """n int64 ids, ranks Zipf(a), each rank mapped to a fixed pseudo-random non-negative id."""
    ranks = np.random.default_rng(seed).zipf(a, n).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = ranks * np.uint64(0x9E3779B97F4A7C15)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(1)).astype(np.int64)


def report(rows):
    """Prints aligned 'name  value' rows."""
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def pyplot(path):
    """matplotlib.pyplot on the Agg backend, or None (with a message that `path` is not drawn)
    when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install -r benchmarks/requirements.txt): {path} not drawn")
        return None
    return plt
