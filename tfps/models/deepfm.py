"""DeepFM (Guo et al. 2017) on tfps hash-table embeddings.

Each feature's row has width dim + 1: the first dim columns are its FM/deep embedding, the last
its first-order weight, so one probe per id serves both.
    logit = sum_f w_f + <a, dense> + FM(v) + MLP([v_1 .. v_F, dense])
"""
import tensorflow as tf

from tfps.data.schema import Schema
from tfps.embedding.merged import Feature, lookup_feature_matrix
from tfps.embedding.options import EmbeddingOptions
from tfps.models.common import dense_input, dense_layer, mlp, split_rows


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


def deepfm(rows, dense, model):
    """logits [B] from rows [B, F, dim + 1] and dense [B, num_dense] (or None)."""
    dim = rows.shape[-1] - 1
    v, w = split_rows(rows)                                        # [B, F, D], [B, F]
    first_order = tf.reduce_sum(w, 1)
    deep = tf.reshape(v, [-1, rows.shape[1] * dim])
    if dense is not None:
        first_order += tf.squeeze(dense_layer(dense, 1, "dense_linear"), 1)
        deep = tf.concat([deep, dense], 1)
    summed = tf.reduce_sum(v, 1)
    fm = 0.5 * tf.reduce_sum(tf.square(summed) - tf.reduce_sum(tf.square(v), 1), 1)
    return first_order + fm + mlp(deep, model["hidden_units"])


def deepfm_logits(features, num_categorical, embedding_dim, hidden_units, num_shards=1,
                  initializer_stddev=0.02, insert=True, embed=None, merge=True):
    """logits float32 [B] of DeepFM on the synthetic layout (features["dense"] raw counts [B, Nd],
    features["ids"] [B, >= num_categorical]). embed(ids [B, F]) -> [B, F, embedding_dim + 1] gives
    the features' rows; by default tfps feature tables (feature_embedder, merged unless merge=False)."""
    ids = features["ids"][:, :num_categorical]
    schema = Schema(num_dense=features["dense"].shape[1], id_features=(), dense_log1p=True)
    embed = embed or feature_embedder(embedding_dim, num_shards, initializer_stddev, insert, merge)
    return deepfm(embed(ids), dense_input(features, schema), {"hidden_units": hidden_units})
