"""MTGR: a generative ranker on tfps tables -- one pass over a user's tokens scores all of its
candidates (user-level aggregation), with HSTU blocks, Group-Layer Norm and the dynamic mask of
tfps.models.hstu, and the DLRM cross features kept on the candidate tokens.

Input: padded batches of tfps.data.sequences samples (0 pads every movie field; MovieLens ids
start at 1). Tokens, each projected to d_model:
  profile    each profile feature one token (its own table rows);
  history,   the item's row and the rating, concatenated, through one MLP (time enters through
  realtime   the blocks' relative bias);
  candidate  the item's row, its genres and (model.cross_features) the cross features, through
             another MLP.
Then model.blocks HSTU blocks (model.heads, model.gln), and per candidate token a LayerNorm and
a linear logit. model.dynamic_mask off (the ablation): a candidate sees the static tokens and
only the real-time tokens before the window's first request, as if real-time were frozen there.

    logits, valid = mtgr_logits(features, model, insert=True)   # [B, K], bool [B, K]
"""
import dataclasses

import numpy as np
import tensorflow as tf

from tfps.embedding import embedding_lookup, get_embedding_variable
from tfps.embedding.model_graph import ModelGraph
from tfps.data.sequences import SCHEMA, SPEC
from tfps.models.common import check_dense_shape, model_spec
from tfps.models.spec import ModeKeys, ModelSpec, PredictOutput, SERVING_SIGNATURE
from tfps.models.hstu import CANDIDATE, HISTORY, PAD, PROFILE, REALTIME, group_layer_norm, hstu_block, mtgr_mask

PROFILE_BITS = 40   # profile feature f's value v has key (f << PROFILE_BITS) + v


def _table(name, dim, model, model_graph):
    return get_embedding_variable(
        name, dim, initializer=tf.compat.v1.truncated_normal_initializer(stddev=model["initializer_stddev"]),
        model_graph=model_graph)


def _mlp(x, units, name):
    """x [..., k] -> [..., units[-1]]: SiLU layers, the last one linear."""
    for i, u in enumerate(units):
        check_dense_shape([x.shape[-1], u], f"{name}_{i}/kernel")
        with tf.compat.v1.variable_scope(f"{name}_{i}"):
            w = tf.compat.v1.get_variable("kernel", [x.shape[-1], u], initializer=tf.compat.v1.glorot_uniform_initializer())
            b = tf.compat.v1.get_variable("bias", [u], initializer=tf.compat.v1.zeros_initializer())
        x = tf.tensordot(x, w, 1) + b
        x = tf.nn.silu(x) if i + 1 < len(units) else x
    return x


def _item_tokens(movie_rows, rating, d):
    """An interaction's token: its item's row and its rating. (Time enters through the blocks'
    relative bias, per query: a token's own feature cannot depend on which candidate asks.)"""
    return _mlp(tf.concat([movie_rows, tf.expand_dims(rating / 5.0, -1)], -1), [2 * d, d], "item_mlp")


def mtgr_logits(features, model, insert, model_graph=None):
    """(logits float32 [B, K], valid bool [B, K]) for a padded batch of samples; a batch without
    candidates (K = 0) is InvalidArgumentError naming candidate_movie when run. model_graph: the
    tfps.embedding.ModelGraph of the tables and lookups (None: the default graph's)."""
    d, e = model["d_model"], model["embedding_dim"]
    model_graph = model_graph or ModelGraph.of()

    def rows(ev, ids):
        return embedding_lookup(ev, ids, insert=insert, step=model_graph.step)
    movies = _table("mtgr_movie", e, model, model_graph)
    profile = features["profile"]                                                   # [B, P]
    p = profile.shape[1]
    keys = profile + (tf.range(p, dtype=tf.int64) * (1 << PROFILE_BITS))[None]
    profile_tokens = _mlp(rows(_table("mtgr_profile", e, model, model_graph), keys), [d], "profile")
    # history and real-time share the item MLP
    history = _item_tokens(rows(movies, features["history_movie"]),
                           features["history_rating"], d)
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
        realtime = _item_tokens(rows(movies, features["realtime_movie"]),
                                features["realtime_rating"], d)
    parts = [rows(movies, features["candidate_movie"]),
             tf.cast(features["candidate_genres"], tf.float32)]
    if model["cross_features"]:
        parts.append(features["cross"])
    candidates = _mlp(tf.concat(parts, -1), [2 * d, d], "candidate")
    x = tf.concat([profile_tokens, history, realtime, candidates], 1)               # [B, N, d]

    def groups(ids, group):
        return tf.where(ids > 0, tf.fill(tf.shape(ids), group), tf.fill(tf.shape(ids), PAD))
    b = tf.shape(profile)[0]
    realtime_ids, realtime_time = features["realtime_movie"], features["realtime_time"]
    if not model["dynamic_mask"]:
        # frozen real-time: tokens at or after the window's first request are hidden (as padding)
        request = tf.reduce_min(tf.where(features["candidate_movie"] > 0, features["candidate_time"],
                                         tf.int64.max), 1, keepdims=True)
        realtime_ids = tf.where(realtime_time < request, realtime_ids, tf.zeros_like(realtime_ids))
    group = tf.concat([tf.fill([b, p], PROFILE), groups(features["history_movie"], HISTORY),
                       groups(realtime_ids, REALTIME), groups(features["candidate_movie"], CANDIDATE)], 1)
    time = tf.concat([tf.zeros([b, p], tf.int64), features["history_time"], realtime_time, features["candidate_time"]], 1)
    mask = mtgr_mask(group, time)
    for i in range(model["blocks"]):
        x = hstu_block(x, group, time, mask, model["heads"], f"hstu_{i}", gln=model["gln"])
    k, n = tf.shape(candidates)[1], tf.shape(x)[1]
    # a batch without candidates has nothing to score (x[:, -0:] would be every token)
    some = tf.debugging.assert_positive(k, message="mtgr: the candidates feature candidate_movie holds no candidate "
                                                   "(shape [B, 0]); a request needs at least one to score")
    out = group_layer_norm(x[:, n - k:], group[:, n - k:], "final_ln", enabled=model["gln"])
    logits = tf.squeeze(_mlp(out, [1], "logit"), -1)
    with tf.control_dependencies([some]):
        return tf.identity(logits), features["candidate_movie"] > 0


def mtgr_model_fn(features, labels, mode, params, model_graph=None):
    """tfps model_fn (returns a tfps.models.spec.ModelSpec). params: the JobConfig's `model`
    (d_model, heads, blocks, gln, dynamic_mask, cross_features, embedding_dim,
    initializer_stddev) and `train` sections as dicts. labels are unused (each candidate's label is features["label"]). PREDICT gives
    probabilities and logits [B, K] (padding candidates included, at any value); EVAL and TRAIN
    see the real candidates only, as one binary classifier (AUC, GAUC by user, logloss).
    model_graph: as for tfps.models.zoo.model_fn."""
    del labels
    logits, valid = mtgr_logits(features, params["model"], insert=mode == ModeKeys.TRAIN,
                                model_graph=model_graph)
    if mode == ModeKeys.PREDICT:
        predictions = {"probabilities": tf.sigmoid(logits), "logits": logits, "valid": valid}
        return ModelSpec(mode, predictions=predictions, export_outputs={SERVING_SIGNATURE: PredictOutput(predictions)})
    users = tf.broadcast_to(features["user"][:, None], tf.shape(valid))
    return model_spec(mode, tf.boolean_mask(logits, valid), tf.boolean_mask(features["label"], valid),
                      {"user": tf.boolean_mask(users, valid)}, SCHEMA, params["train"], model_graph=model_graph)


def flops_per_sample(model, samples):
    """Forward floating-point operations per sample of the MTGR model `model` (a dict, as
    mtgr_logits takes) on these samples padded into one batch, counted by the TF profiler
    (table lookups are not floating-point work and count 0)."""
    def padded(arrays):   # zeros after each, to the longest
        arrays = [np.asarray(a) for a in arrays]
        if arrays[0].ndim == 0:
            return np.stack(arrays)
        out = np.zeros((len(arrays), max(len(a) for a in arrays)) + arrays[0].shape[1:], arrays[0].dtype)
        for i, a in enumerate(arrays):
            out[i, :len(a)] = a
        return out
    batch = {k: padded([s[k] for s in samples]) for k in SPEC}
    with tf.Graph().as_default() as graph:
        features = {k: tf.constant(v, dtype=SPEC[k].dtype) for k, v in batch.items()}
        mtgr_logits(features, model, insert=False)
        opts = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        opts["output"] = "none"
        stats = tf.compat.v1.profiler.profile(graph, options=opts)
    return stats.total_float_ops / len(samples)


def describe_cost(cfg, source):
    """One line: MTGR's forward FLOPs per sample (TF profiler, 64 training samples of `source`, a
    sequence source, padded into one batch)."""
    flops = flops_per_sample(dataclasses.asdict(cfg.model), source.samples("train", 64))
    return f"MTGR forward: {flops / 1e6:.2f} MFLOPs per sample ({cfg.model.blocks} blocks, d_model " \
           f"{cfg.model.d_model}; TF profiler, 64 samples padded into one batch)"
