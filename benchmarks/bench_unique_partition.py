"""tfps.ops.unique_partition vs tf.unique + tf.dynamic_partition (ids and positions), one process.

The TF baseline is what a sharded lookup does with built-ins: unique the ids, then split the
unique ids and their positions by floormod(id, P). 2 threads, 8 partitions.
"""
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report, session, time_interleaved, zipf_ids  # noqa: E402

tf.compat.v1.disable_eager_execution()
from tfps.ops.unique_partition_ops import unique_partition  # noqa: E402

P = 8


def case(name, ids_np):
    with tf.Graph().as_default():
        # A variable, not a constant: Grappler would fold both sides away.
        ids = tf.compat.v1.get_variable("ids", initializer=ids_np, trainable=False).read_value()
        ours = unique_partition(ids, P)
        uniq, idx = tf.unique(ids)
        part = tf.cast(tf.math.floormod(uniq, P), tf.int32)
        theirs = (tf.dynamic_partition(uniq, part, P), tf.dynamic_partition(tf.range(tf.size(uniq)), part, P), idx)
        # Ops as targets (not tf.group: Grappler prunes stateless ops that only feed a NoOp).
        ours_op = ours[0].op
        theirs_op = list({t.op for t in tf.nest.flatten(theirs)})
        with session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            t_ours, t_tf = time_interleaved(s, [ours_op, theirs_op])
            n_unique = s.run(tf.size(ours[0]))
    n = len(ids_np)
    return [(f"{name}: {n} ids, {n_unique} unique", ""),
            ("  tfps unique_partition", f"{n / t_ours / 1e6:6.1f} M ids/s"),
            ("  tf.unique + tf.dynamic_partition x2", f"{n / t_tf / 1e6:6.1f} M ids/s"),
            ("  RATIO", f"{t_tf / t_ours:.2f}x" + ("  (required >= 4, aim 6)" if n == 1 << 20 and "Zipf" in name else ""))]


def shard_balance():
    """max/mean distinct keys per shard on the demo data (tagged keys of the merged table, as
    sharded variables see them), mod vs hash partitioning."""
    from tfps.data import SyntheticConfig, SyntheticCriteo
    from tfps.embedding.merged import Feature
    from tfps.ops.unique_partition_ops import feature_tag
    gen = SyntheticCriteo(SyntheticConfig())
    ids = np.concatenate([gen.batch(i, 4096)[1] for i in range(20)])
    tags = [Feature(f"C{f + 1}", 9).tag for f in range(ids.shape[1])]
    rows = [("shard balance on demo data (max/mean distinct keys per shard)", "")]
    with tf.Graph().as_default(), session() as s:
        keys = s.run(tf.reshape(feature_tag(tf.constant(ids), tags), [-1]))
        for p in (2, 3, 4, 8):
            line = []
            for strategy in ("mod", "hash"):
                _, _, off = unique_partition(keys, p, strategy=strategy)
                sizes = np.diff(s.run(off))
                line.append(f"{strategy} {sizes.max() / sizes.mean():.4f}")
            rows.append((f"  {p} shards", ", ".join(line)))
    return rows


def main():
    rows = []
    rows += case("Zipf(1.2)", zipf_ids(1 << 20))
    rows += case("Zipf(1.2)", zipf_ids(1 << 17, seed=1))
    rows += case("uniform", np.random.default_rng(2).integers(0, 2**62, 1 << 20))
    rows += shard_balance()
    report(rows)


if __name__ == "__main__":
    main()
