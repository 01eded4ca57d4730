"""DCN-v2 (Wang et al. 2021): a cross network of full-rank layers beside or before an MLP.

    x0 = [v_1 .. v_F, dense]                      (K values)
    x_{l+1} = x0 * (W_l x_l + b_l) + x_l           W_l [K, K], l < model.cross_layers
    stacked:  logit = MLP(x_L)
    parallel: logit = w . [x_L, MLP_hidden(x0)] + b
"""
import tensorflow as tf

from tfps.models.common import dense_layer, hidden, mlp


def cross_layer(x0, x, name):
    """One DCN-v2 cross layer: x0, x [B, K] -> x0 * (x W + b) + x, [B, K]."""
    return x0 * dense_layer(x, x.shape[-1], name) + x


def cross_network(x0, layers):
    x = x0
    for i in range(layers):
        x = cross_layer(x0, x, f"cross_{i}")
    return x


def dcn_v2(rows, dense, model):
    """logits [B] from rows [B, F, dim] and dense [B, num_dense] (or None)."""
    x0 = tf.reshape(rows, [-1, rows.shape[1] * rows.shape[2]])
    if dense is not None:
        x0 = tf.concat([x0, dense], 1)
    crossed = cross_network(x0, model["cross_layers"])
    if model["dcn_structure"] == "stacked":
        return mlp(crossed, model["hidden_units"])
    both = tf.concat([crossed, hidden(x0, model["hidden_units"])], 1)
    return tf.squeeze(dense_layer(both, 1, "logit"), 1)
