"""Placement of the demo model (DeepFM, dim 16, MLP 400x3) over 4 PS tasks: round-robin (stock
replica_device_setter, tables on PS) vs LoadBalancedStrategy, in two layouts:
  merged:   the 26 features in one table of 4 shards (10^7 expected rows);
  unmerged: a table per feature, expected rows = the feature's vocabulary in the demo data
            (100 ... 200,000).
Bytes per task are the strategy's estimates (tables: expected rows x row bytes)."""
import sys

import tensorflow as tf

sys.path.insert(0, __import__("os").path.dirname(__file__))
from common import report  # noqa: E402

tf.compat.v1.disable_eager_execution()
import tfps  # noqa: E402
from tfps.cluster import LoadBalancedStrategy  # noqa: E402
from tfps.models.deepfm import deepfm_logits  # noqa: E402

PS = 4


def loads(setter, sizer, merge):
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(setter):
        feats = {"dense": tf.zeros([8, 13]), "ids": tf.zeros([8, 26], tf.int64)}
        deepfm_logits(feats, 26, 16, [400, 400, 400], num_shards=4 if merge else 1, merge=merge)
    out = [0] * PS
    for op in g.get_operations():
        if op.type in ("VarHandleOp", "TfpsTableHandle"):
            out[tf.DeviceSpec.from_string(op.device).task] += sizer.bytes_of(op)
    return out


def main():
    from tfps.data import SyntheticConfig, SyntheticCriteo
    vocab = SyntheticCriteo(SyntheticConfig()).vocab_sizes
    layouts = {"merged": 10**7 // 4,
               "unmerged": {f"tfps_features/C{f + 1}/": int(v) for f, v in enumerate(vocab)}}
    fmt = lambda xs: " ".join(f"{x / 2**20:7.1f}" for x in xs)  # noqa: E731
    rows = []
    for layout, expected in layouts.items():
        sizer = LoadBalancedStrategy(PS, expected_rows=expected)
        rr = loads(tf.compat.v1.train.replica_device_setter(ps_tasks=PS, ps_ops=["VarHandleOp", "TfpsTableHandle"]),
                   sizer, layout == "merged")
        lb = loads(tfps.cluster.replica_device_setter(ps_tasks=PS, ps_strategy=LoadBalancedStrategy(
            PS, expected_rows=expected)), sizer, layout == "merged")
        planned = LoadBalancedStrategy(PS, expected_rows=expected)
        if isinstance(expected, dict):  # the config knows every table: plan them largest first
            planned.plan({name: rows_ * (4 * 17 * 2 + 8) for name, rows_ in expected.items()})
        lbp = loads(tfps.cluster.replica_device_setter(ps_tasks=PS, ps_strategy=planned), sizer,
                    layout == "merged")
        rows += [(f"{layout}: MiB per PS task, round-robin", fmt(rr)),
                 (f"{layout}: MiB per PS task, load-balanced", fmt(lb)),
                 (f"{layout}: MiB per PS task, load-balanced + planned", fmt(lbp)),
                 (f"{layout}: max/mean round-robin / balanced / planned",
                  f"{max(rr) / (sum(rr) / PS):.3f} / {max(lb) / (sum(lb) / PS):.3f} / "
                  f"{max(lbp) / (sum(lbp) / PS):.3f}")]
    report(rows)


if __name__ == "__main__":
    main()
