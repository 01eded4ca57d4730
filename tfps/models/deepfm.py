"""DeepFM (Guo et al. 2017) on tfps hash-table embeddings, as a tf.estimator model_fn.

Inputs: features["dense"] float32 [B, num_dense], features["ids"] int64 [B, num_categorical];
labels float32 [B]. Each categorical feature has one table of width dim + 1: the first dim
columns are its FM/deep embedding, the last is its first-order weight, so one probe per id
serves both.
"""
import tensorflow as tf

import tfps
from tfps.embedding.merged import Feature, lookup_feature_matrix
from tfps.embedding.options import EmbeddingOptions
from tfps.models.common import LOSS_COLLECTION


def dense_layer(x, units, name, activation=None):
    """x [B, K] -> [B, units]: glorot-uniform kernel, zero bias (tf.compat.v1.layers.dense defaults)."""
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable("kernel", [x.shape[-1], units],
                                           initializer=tf.compat.v1.glorot_uniform_initializer())
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, kernel) + bias
        return activation(y) if activation else y


def table_per_feature_embedder(embedding_dim, num_shards=1, initializer_stddev=0.02, insert=True):
    """embed(ids [B, F]) -> [B, F, embedding_dim + 1]: one tfps table per feature, named C1..CF,
    one lookup per feature."""
    init = tf.compat.v1.truncated_normal_initializer(stddev=initializer_stddev)

    def embed(ids):
        rows = []
        for f in range(ids.shape[1]):
            ev = tfps.get_embedding_variable(f"C{f + 1}", embedding_dim + 1, initializer=init,
                                             num_shards=num_shards)
            rows.append(tfps.embedding_lookup(ev, ids[:, f], insert=insert))
        return tf.stack(rows, axis=1)
    return embed


def feature_embedder(embedding_dim, num_shards=1, initializer_stddev=0.02, insert=True, merge=True, stats=None,
                     options=None):
    """embed(ids [B, F]) -> [B, F, embedding_dim + 1] through tfps.embedding.merged: features
    C1..CF, merged into one physical table (merge=True: one fused, deduplicated lookup) or
    one table each (merge=False); both start and train identically. options: the features'
    tfps.EmbeddingOptions (default: num_shards and merge as given)."""
    init = tf.compat.v1.truncated_normal_initializer(stddev=initializer_stddev)
    options = options or EmbeddingOptions(num_shards=num_shards, merge=merge)

    def embed(ids):
        features = [Feature(f"C{f + 1}", embedding_dim + 1, init, options=options) for f in range(ids.shape[1])]
        return lookup_feature_matrix(features, ids, insert=insert, stats=stats)
    return embed


def deepfm_logits(features, num_categorical, embedding_dim, hidden_units, num_shards=1,
                  initializer_stddev=0.02, insert=True, embed=None, merge=True):
    """logits float32 [B] of DeepFM. embed(ids [B, F]) -> [B, F, embedding_dim + 1] gives the
    features' rows; by default tfps feature tables (feature_embedder, merged unless merge=False)."""
    ids = features["ids"][:, :num_categorical]
    dense = tf.math.log1p(tf.maximum(tf.cast(features["dense"], tf.float32), 0.0))
    embed = embed or feature_embedder(embedding_dim, num_shards, initializer_stddev, insert, merge)
    rows = embed(ids)                                              # [B, F, D+1]
    v, w = rows[:, :, :embedding_dim], rows[:, :, embedding_dim]   # [B, F, D], [B, F]
    first_order = tf.reduce_sum(w, 1) + tf.squeeze(dense_layer(dense, 1, "dense_linear"), 1)
    summed = tf.reduce_sum(v, 1)
    fm = 0.5 * tf.reduce_sum(tf.square(summed) - tf.reduce_sum(tf.square(v), 1), 1)
    deep = tf.concat([tf.reshape(v, [-1, num_categorical * embedding_dim]), dense], 1)
    for i, units in enumerate(hidden_units):
        deep = dense_layer(deep, units, f"mlp_{i}", tf.nn.relu)
    deep = tf.squeeze(dense_layer(deep, 1, "mlp_out"), 1)
    return first_order + fm + deep


def make_optimizer(train):
    """The tfps optimizer of a JobConfig's `train` section (as a dict): sgd, adagrad, adam or ftrl
    with their hyper-parameters."""
    name, lr = train["optimizer"], train["learning_rate"]
    if name == "sgd":
        return tfps.train.GradientDescentOptimizer(lr)
    if name == "adagrad":
        return tfps.train.AdagradOptimizer(lr, **train["adagrad"])
    if name == "adam":
        return tfps.train.AdamOptimizer(lr, **train["adam"])
    if name == "ftrl":
        return tfps.train.FtrlOptimizer(lr, **train["ftrl"])
    raise ValueError(f"unknown optimizer {name!r} (sgd, adagrad, adam or ftrl)")


def embedding_options(model):
    """tfps.EmbeddingOptions of a JobConfig's `model` section (as a dict)."""
    e = model["eviction"]
    return EmbeddingOptions(num_shards=model["num_shards"], merge=model["merge_tables"],
                            admit_min_count=model["admit_min_count"],
                            admit_sketch_width=model["admit_sketch_width"], evict_after_steps=e["after_steps"],
                            evict_min_freq=e["min_freq"], evict_l2_below=e["l2_below"], max_rows=e["max_rows"],
                            cap_policy=e["cap_policy"])


def model_fn(features, labels, mode, params):
    """tf.estimator model_fn. params: the JobConfig's `model` and `train` sections as dicts plus
    'num_categorical'."""
    m, t = params["model"], params["train"]
    training = mode == tf.estimator.ModeKeys.TRAIN
    embed = feature_embedder(m["embedding_dim"], m["num_shards"], m["initializer_stddev"], insert=training,
                             options=embedding_options(m))
    logits = deepfm_logits(features, params["num_categorical"], m["embedding_dim"], m["hidden_units"],
                           insert=training, embed=embed)
    probs = tf.sigmoid(logits)
    if mode == tf.estimator.ModeKeys.PREDICT:
        predictions = {"probabilities": probs, "logits": logits}
        return tf.estimator.EstimatorSpec(mode, predictions=predictions, export_outputs={
            "serving_default": tf.estimator.export.PredictOutput(predictions)})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    tf.compat.v1.add_to_collection(LOSS_COLLECTION, loss)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops={
            "auc": tf.compat.v1.metrics.auc(labels, probs, num_thresholds=1000)})
    gs = tf.compat.v1.train.get_or_create_global_step()
    train_op = make_optimizer(t).minimize(loss, global_step=gs)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
