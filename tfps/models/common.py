"""What every tfps model shares: input embedding, MLP, the head (loss, metrics, training, and the
batch's example count the runners read back from the ModelSpec).

A model is logits(rows, dense, model) where rows [B, fields, width] are the embeddings of a
batch's features (embed_inputs) and dense [B, num_dense] its dense values (dense_input).
"""
import tensorflow as tf

from tfps import train as train_lib
from tfps.config import ConfigError
from tfps.data.schema import PAD_ID
from tfps.embedding.lookup import combine_padded
from tfps.embedding.merged import Feature, lookup_feature_matrix, lookup_features
from tfps.embedding.model_graph import ModelGraph
from tfps.embedding.options import EmbeddingOptions
from tfps.metrics import streaming_metrics, streaming_sum
from tfps.models.spec import ModeKeys, ModelSpec, PredictOutput, SERVING_SIGNATURE
from tfps.state import manifest as manifests

BAD_ROWS_VARIABLE = "tfps_bad_rows"   # malformed training rows the readers skipped (global, checkpointed)


# The most values one dense kernel may hold (4 GiB of float32, as much again per optimizer slot):
# a larger one -- model.embedding_dim times the features feeding an MLP, say -- is refused before
# its variable is made (TF would fail to make it, or the process run out of memory).
MAX_DENSE_VALUES = 1 << 30


def check_dense_shape(shape, name):
    """ConfigError naming the variable when a dense variable of this shape (ints) is larger than
    MAX_DENSE_VALUES."""
    dims = [int(d) for d in shape]
    values = 1
    for d in dims:
        values *= d
    if values > MAX_DENSE_VALUES:
        raise ConfigError(f"dense variable {name} of shape {dims} has {values} values, more than the "
                          f"{MAX_DENSE_VALUES} a model allows: lower model.embedding_dim, model.hidden_units or "
                          f"model.d_model (or use fewer features)")


def dense_layer(x, units, name, activation=None, kernel_initializer=None, kernel_regularizer=None):
    """x [B, K] -> [B, units]: glorot-uniform kernel, zero bias (tf.compat.v1.layers.dense defaults,
    the same variable names, on any Keras: tf.compat.v1.layers needs Keras 2); a kernel_regularizer's
    loss goes to the REGULARIZATION_LOSSES collection. ConfigError when the kernel would be larger
    than MAX_DENSE_VALUES."""
    check_dense_shape([x.shape[-1], units], f"{name}/kernel")
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable("kernel", [x.shape[-1], units], regularizer=kernel_regularizer,
                                           initializer=kernel_initializer or tf.compat.v1.glorot_uniform_initializer())
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, kernel) + bias
        return activation(y) if activation else y


def split_rows(rows):
    """(v [B, F, dim], w [B, F]) of rows [B, F, dim + 1]: each feature's embedding and its
    first-order weight. tf.split, not rows[:, :, :dim]: TF's strided slice of a 3-D tensor and its
    gradient ran 2.6x as long (2.0 vs 0.8 ms forward and backward at [1024, 26, 9]); the values
    and gradients are the same."""
    v, w = tf.split(rows, [-1, 1], axis=2)
    return v, tf.squeeze(w, 2)


def mlp(x, hidden_units, prefix="mlp"):
    """ReLU layers prefix_0, prefix_1, ... of the given widths, then a linear prefix_out to one
    logit: x [B, K] -> [B]."""
    return tf.squeeze(dense_layer(hidden(x, hidden_units, prefix), 1, f"{prefix}_out"), 1)


def hidden(x, hidden_units, prefix="mlp"):
    """The ReLU layers of mlp without the output layer: x [B, K] -> [B, hidden_units[-1]]."""
    for i, units in enumerate(hidden_units):
        x = dense_layer(x, units, f"{prefix}_{i}", tf.nn.relu)
    return x


def make_optimizer(train, library=train_lib):
    """The optimizer of a JobConfig's `train` section (as a dict): sgd, adagrad, adam or ftrl with
    their hyper-parameters, from `library`: tfps.train, or tf.compat.v1.train for the stock
    baseline model.hashing_trick (whose Adam decays every row's moments each step). The two have the
    same class names and arguments."""
    name, lr = train["optimizer"], train["learning_rate"]
    if name == "sgd":
        return library.GradientDescentOptimizer(lr)
    if name == "adagrad":
        return library.AdagradOptimizer(lr, **train["adagrad"])
    if name == "adam":
        return library.AdamOptimizer(lr, **train["adam"])
    if name == "ftrl":
        return library.FtrlOptimizer(lr, **train["ftrl"])
    raise ValueError(f"unknown optimizer {name!r} (sgd, adagrad, adam or ftrl)")


def hashing_embed_inputs(features, schema, width, buckets, partitions, initializer_stddev=0.02):
    """embed_inputs of the hashing-trick baseline (model.hashing_trick): rows float32 [B, F, width],
    each single-valued feature a tf.Variable [buckets, width] in `partitions` parts
    (fixed_size_partitioner; a replica_device_setter spreads them over the PS tasks) looked up with
    tf.nn.embedding_lookup of id mod buckets (the hashing trick)."""
    if schema.list_features:
        raise ConfigError(f"model.hashing_trick takes single-valued features only; the data has list features "
                          f"{', '.join(schema.list_features)}")
    check_dense_shape([buckets, width], "stock_embedding/<feature>")
    init = tf.compat.v1.truncated_normal_initializer(stddev=initializer_stddev)
    ids, rows = features["ids"], []
    with tf.compat.v1.variable_scope("stock_embedding"):
        for i, name in enumerate(schema.id_features):
            table = tf.compat.v1.get_variable(name, [buckets, width], initializer=init,
                                              partitioner=tf.compat.v1.fixed_size_partitioner(partitions))
            rows.append(tf.nn.embedding_lookup(table, tf.math.floormod(ids[:, i], buckets)))
    return tf.stack(rows, axis=1)


def embedding_options(model):
    """tfps.EmbeddingOptions of a JobConfig's `model` section (as a dict)."""
    e = model["eviction"]
    return EmbeddingOptions(num_shards=model["num_shards"], merge=model["merge_tables"],
                            admit_min_count=model["admit_min_count"],
                            admit_sketch_width=model["admit_sketch_width"], evict_after_steps=e["after_steps"],
                            evict_min_freq=e["min_freq"], evict_l2_below=e["l2_below"], max_rows=e["max_rows"],
                            cap_policy=e["cap_policy"])


def padded_to_sparse(padded):
    """int64 [B, L] padded with PAD_ID -> SparseTensor [B, L] of the ids (row-major)."""
    where = tf.where(tf.not_equal(padded, PAD_ID))
    return tf.SparseTensor(where, tf.gather_nd(padded, where), tf.shape(padded, out_type=tf.int64))


def embed_inputs(features, schema, width, options, initializer_stddev=0.02, insert=True, model_graph=None):
    """rows float32 [B, F + L, width]: one row per single-valued feature (schema.id_features,
    the columns of features["ids"]) then the mean row of each list feature (schema.list_features;
    a row with no ids gets zeros). With merged options all of them share one table and one
    fused, deduplicated lookup. model_graph: the tfps.embedding.ModelGraph holding the tables
    and the training step (None: the default graph's)."""
    init = tf.compat.v1.truncated_normal_initializer(stddev=initializer_stddev)
    singles = [Feature(name, width, init, options=options) for name in schema.id_features]
    ids = features["ids"]
    if not schema.list_features:
        return lookup_feature_matrix(singles, ids, insert=insert, model_graph=model_graph)
    requests = [(f, ids[:, i]) for i, f in enumerate(singles)]
    requests += [(Feature(name, width, init, options=options), padded_to_sparse(features[name]), "mean")
                 for name in schema.list_features]
    return tf.stack(lookup_features(requests, insert=insert, combine=combine_padded, model_graph=model_graph), axis=1)


def dense_input(features, schema):
    """float32 [B, num_dense] (None when the schema has no dense values)."""
    if schema.num_dense == 0:
        return None
    dense = tf.cast(features["dense"], tf.float32)
    return tf.math.log1p(tf.maximum(dense, 0.0)) if schema.dense_log1p else dense


def _count_bad_rows(features):
    """An op adding the batch's skipped rows to the global BAD_ROWS_VARIABLE (None without them)."""
    if "bad_rows" not in features:
        return None
    with tf.compat.v1.variable_scope(tf.compat.v1.VariableScope(name="", reuse=tf.compat.v1.AUTO_REUSE)):
        counter = tf.compat.v1.get_variable(BAD_ROWS_VARIABLE, [], tf.int64, tf.compat.v1.zeros_initializer(),
                                            trainable=False, use_resource=True)
    return counter.assign_add(tf.cast(features["bad_rows"], tf.int64))


def model_spec(mode, logits, labels, features, schema, train, hashing_trick=False, model_graph=None):
    """The ModelSpec (tfps.models.spec) of a binary classifier with logits [B]:
    PREDICT: probabilities and logits (the serving signature);
    EVAL: loss and exact streaming auc, logloss, gauc (when the schema has users) and bad_rows;
    TRAIN: the config's tfps optimizer (hashing_trick: TensorFlow's own) on model_graph's step (None:
    the default graph's ModelGraph); skipped rows are added to BAD_ROWS_VARIABLE.
    EVAL and TRAIN specs carry the batch's example count (the labels')."""
    model_graph = model_graph or ModelGraph.of()
    probs = tf.sigmoid(logits)
    if mode == ModeKeys.PREDICT:
        predictions = {"probabilities": probs, "logits": logits}
        return ModelSpec(mode, predictions=predictions, export_outputs={SERVING_SIGNATURE: PredictOutput(predictions)})
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    # the mean, and 0 for a batch without rows (one that only carries a reader's bad-row count)
    loss = tf.math.divide_no_nan(tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)),
                                 tf.cast(tf.size(labels), tf.float32))
    examples = tf.size(labels)
    if mode == ModeKeys.EVAL:
        metrics = streaming_metrics(labels, probs, features["user"] if schema.has_users else None)
        if "bad_rows" in features:
            metrics["bad_rows"] = streaming_sum(features["bad_rows"])
        return ModelSpec(mode, loss=loss, eval_metric_ops=metrics, examples=examples)
    gs = tf.compat.v1.train.get_or_create_global_step()
    if hashing_trick:
        optimizer = make_optimizer(train, tf.compat.v1.train)
        # part of the fingerprint, as tfps's optimizers record theirs
        manifests.record_optimizer(optimizer, model_graph)
        train_op = optimizer.minimize(loss, global_step=gs)
    else:
        train_op = make_optimizer(train).minimize(loss, global_step=gs, step=model_graph.step)
    counted = _count_bad_rows(features)
    if counted is not None:
        train_op = tf.group(train_op, counted)
    return ModelSpec(mode, loss=loss, train_op=train_op, examples=examples)

