"""Wide & Deep (Cheng et al. 2016) on tfps embeddings.

Each feature's row has width dim + 1, as in DeepFM: dim columns feed the deep part, the last is
the feature's wide (linear) weight.
    logit = sum_f w_f + <a, dense> + MLP([v_1 .. v_F, dense])
"""
import tensorflow as tf

from tfps.models.common import dense_layer, mlp, split_rows


def wdl(rows, dense, model):
    """logits [B] from rows [B, F, dim + 1] and dense [B, num_dense] (or None)."""
    dim = rows.shape[-1] - 1
    v, w = split_rows(rows)
    wide = tf.reduce_sum(w, 1)
    deep = tf.reshape(v, [-1, rows.shape[1] * dim])
    if dense is not None:
        wide += tf.squeeze(dense_layer(dense, 1, "wide_dense"), 1)
        deep = tf.concat([deep, dense], 1)
    return wide + mlp(deep, model["hidden_units"])
