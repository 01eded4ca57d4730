"""HSTU blocks with Group-Layer Normalization and MTGR's dynamic mask (the MTGR ranker's core).

A sample is one user's tokens, in four groups (GROUPS): the profile features, the history
items, the real-time items (the latest interactions) and the candidates to score, each token
with a time (history and real-time: the interaction's; candidates: the request's; profile: 0).

Dynamic mask (mtgr_mask): query token i may see key token j when both are real (not padding) and
  - j is a profile or history token (visible to every token), or
  - j is a real-time token and i a real-time token at or after it (time, then position), or
  - j is a real-time token and i a candidate whose request came after it (strictly), or
  - j is i itself.
So a candidate never sees another candidate, nor an interaction at or after its request, and the
profile / history / real-time tokens never see a candidate: scoring one user's candidates in one
pass gives each the scores it would get alone.

HSTU block (hstu_block), per head, with x [B, N, d]:
  U, V, Q, K = SiLU(GLN(x) W1)                      (GLN: LayerNorm with parameters per group)
  A = SiLU(Q K^T / sqrt(dh) + rab) * mask / n        (no softmax; n = keys the query sees;
                                                     rab: a learned bias per position distance
                                                     bucket and per log time-gap bucket; all
                                                     candidates share one position)
  x = x + W_o (GLN(A V) * U);  x = x + MLP(GLN(x))
"""
import math

import tensorflow as tf

PROFILE, HISTORY, REALTIME, CANDIDATE = 0, 1, 2, 3
GROUPS = ("profile", "history", "realtime", "candidate")
PAD = -1          # group of a padding token


def mtgr_mask(group, time):
    """Which tokens each token may see.

    Args:
      group: int32 [B, N], one of PROFILE .. CANDIDATE, or PAD.
      time:  int64 [B, N], the token's time (any unit; only order matters).
    Returns:
      bool [B, N, N]: mask[b, i, j] is True when token i may see token j.
    Example: groups [HISTORY, REALTIME, CANDIDATE, CANDIDATE] with times [1, 5, 4, 9]: the
    candidate at 4 sees tokens 0 and itself, the one at 9 sees 0, 1 and itself.
    """
    group = tf.convert_to_tensor(group, tf.int32)
    time = tf.convert_to_tensor(time, tf.int64)
    n = tf.shape(group)[1]
    qg, kg = group[:, :, None], group[:, None, :]
    qt, kt = time[:, :, None], time[:, None, :]
    pos = tf.range(n)
    qp, kp = pos[None, :, None], pos[None, None, :]
    valid = tf.logical_and(tf.not_equal(qg, PAD), tf.not_equal(kg, PAD))
    static_key = tf.logical_or(tf.equal(kg, PROFILE), tf.equal(kg, HISTORY))
    realtime_key = tf.equal(kg, REALTIME)
    earlier = tf.logical_or(kt < qt, tf.logical_and(tf.equal(kt, qt), kp <= qp))
    seen_by_realtime = tf.logical_and(tf.equal(qg, REALTIME), earlier)
    seen_by_candidate = tf.logical_and(tf.equal(qg, CANDIDATE), kt < qt)
    visible = tf.logical_or(static_key, tf.logical_and(realtime_key,
                                                       tf.logical_or(seen_by_realtime, seen_by_candidate)))
    return tf.logical_and(valid, tf.logical_or(visible, tf.equal(qp, kp)))


def small_gather(params, index):
    """tf.gather(params, index) from a small parameter table (a bias or norm table of a few
    rows), with the table read whole and a dense gradient.

    A plain gather of a PS variable runs on the PS and sends back one row per index (B x N x N
    for the relative bias), and its gradient travels back as as many rows. Here the table
    crosses once each way: read whole (one small tensor), gathered on the worker, and its
    gradient summed there into the table's own shape.

    params: a variable or tensor [R, ...]; index: int [...]. Returns [..., ...] as tf.gather."""
    @tf.custom_gradient
    def whole(table):
        return tf.identity(table), lambda dy: tf.convert_to_tensor(dy)
    return tf.gather(whole(tf.convert_to_tensor(params)), index)


def group_layer_norm(x, group, name, enabled=True, epsilon=1e-6):
    """LayerNorm over the last axis with a scale and offset per token group (one shared pair
    when not enabled: plain LayerNorm, for the ablation).

    x: float32 [B, N, d]; group: int32 [B, N] (PAD tokens use the profile's parameters; their
    outputs are never seen). Variables: NAME/scale, NAME/offset, [len(GROUPS), d] or [1, d]."""
    d = x.shape[-1]
    groups = len(GROUPS) if enabled else 1
    with tf.compat.v1.variable_scope(name):
        scale = tf.compat.v1.get_variable("scale", [groups, d], initializer=tf.compat.v1.ones_initializer())
        offset = tf.compat.v1.get_variable("offset", [groups, d], initializer=tf.compat.v1.zeros_initializer())
    # Not tf.nn.moments: Grappler's remapper fuses moments -> rsqrt -> scale into a oneDNN
    # LayerNorm, and with per-token (gathered) scales it aborts the process (TF 2.15,
    # "key not found: value"). The variance from E[x^2] - E[x]^2 is not that pattern.
    mean = tf.reduce_mean(x, -1, keepdims=True)
    var = tf.maximum(tf.reduce_mean(tf.square(x), -1, keepdims=True) - tf.square(mean), 0.0)
    normed = (x - mean) * tf.math.rsqrt(var + epsilon)
    index = tf.maximum(group, 0) if enabled else tf.zeros_like(group)
    return normed * small_gather(scale, index) + small_gather(offset, index)


def _buckets(values, count):
    """int32 buckets of non-negative int64 values: 0, 1, then log2-spaced, capped at count - 1."""
    v = tf.cast(values, tf.float32)
    b = tf.where(v < 1.0, tf.zeros_like(v), tf.floor(tf.math.log(v + 1.0) / math.log(2.0)) + 1.0)
    return tf.cast(tf.minimum(b, count - 1.0), tf.int32)


def token_positions(group):
    """int64 [B, N]: a token's position for the relative bias -- how many real context tokens
    (profile, history, real-time; not padding, not candidates) come before it. Candidates after
    the context all get the same one, and padding counts nowhere, so a candidate's bias depends
    neither on how many others share its pass nor on the other samples of its batch."""
    context = tf.logical_and(tf.not_equal(group, PAD), tf.not_equal(group, CANDIDATE))
    return tf.cumsum(tf.cast(context, tf.int64), axis=1, exclusive=True)


def relative_bias(time, position, heads, name, buckets=16):
    """rab: float32 [B, heads, N, N], a learned bias per head for the log-bucketed position
    distance (position: token_positions) and the log-bucketed time gap between each query and
    key token."""
    distance = tf.abs(position[:, :, None] - position[:, None, :])       # [B, N, N]
    gap = tf.abs(time[:, :, None] - time[:, None, :])                    # [B, N, N]
    with tf.compat.v1.variable_scope(name):
        by_pos = tf.compat.v1.get_variable("position", [buckets, heads], initializer=tf.compat.v1.zeros_initializer())
        by_time = tf.compat.v1.get_variable("time_gap", [buckets, heads], initializer=tf.compat.v1.zeros_initializer())
    bias = small_gather(by_pos, _buckets(distance, buckets)) + small_gather(by_time, _buckets(gap, buckets))
    return tf.transpose(bias, [0, 3, 1, 2])


def hstu_block(x, group, time, mask, heads, name, gln=True):
    """One HSTU block. x: float32 [B, N, d] (d divisible by heads); group, time as mtgr_mask;
    mask: its bool [B, N, N]. Returns float32 [B, N, d]."""
    d = x.shape[-1]
    if d is None or d % heads:
        raise ValueError(f"hstu_block {name}: the model width ({d}) must be known and divisible by heads ({heads})")
    dh = d // heads
    init = tf.compat.v1.glorot_uniform_initializer()

    def split_heads(t):   # [B, N, d] -> [B, heads, N, dh]
        return tf.transpose(tf.reshape(t, [tf.shape(t)[0], tf.shape(t)[1], heads, dh]), [0, 2, 1, 3])

    with tf.compat.v1.variable_scope(name):
        w1 = tf.compat.v1.get_variable("uvqk", [d, 4 * d], initializer=init)
        wo = tf.compat.v1.get_variable("out", [d, d], initializer=init)
        u, v, q, k = tf.split(tf.nn.silu(tf.einsum("bnd,de->bne", group_layer_norm(x, group, "gln_in", gln), w1)), 4, -1)
        scores = tf.einsum("bhqe,bhke->bhqk", split_heads(q), split_heads(k)) / math.sqrt(dh)
        seen = tf.cast(mask, tf.float32)[:, None]                        # [B, 1, N, N]
        keys = tf.maximum(tf.reduce_sum(seen, -1, keepdims=True), 1.0)   # n: the keys each query sees
        attention = tf.nn.silu(scores + relative_bias(time, token_positions(group), heads, "rab")) * seen / keys
        mixed = tf.einsum("bhqk,bhke->bhqe", attention, split_heads(v))
        mixed = tf.reshape(tf.transpose(mixed, [0, 2, 1, 3]), tf.shape(x))
        mixed.set_shape(x.shape)
        x = x + tf.einsum("bnd,de->bne", group_layer_norm(mixed, group, "gln_attention", gln) * u, wo)
        w2 = tf.compat.v1.get_variable("mlp_in", [d, 4 * d], initializer=init)
        w3 = tf.compat.v1.get_variable("mlp_out", [4 * d, d], initializer=init)
        hidden = tf.nn.silu(tf.einsum("bnd,de->bne", group_layer_norm(x, group, "gln_mlp", gln), w2))
        return x + tf.einsum("bne,ed->bnd", hidden, w3)
