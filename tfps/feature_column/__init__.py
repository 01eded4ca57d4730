"""Feature columns over tfps tables: swap a hash-bucket column for a tfps one in one line.

    ids = tfps.feature_column.categorical_column_with_embedding("item", dtype=tf.int64)
    emb = tfps.feature_column.embedding_column(ids, dimension=16)
    net = tf.compat.v1.feature_column.input_layer(features, [emb, ...])   # works
    net = tfps.feature_column.input_layer(features, [emb, ...])           # same output, one fused
                                                                           # lookup per merged table

Columns of equal dim, dtype, initializer and options share one physical table (merging; off with
options=tfps.EmbeddingOptions(merge=False)). With TF's input_layer each column looks its table up
on its own; tfps.feature_column.input_layer deduplicates the ids of all columns of a table
together and probes the table once. `trainable=False` (serving/eval) looks up without inserting.
"""
import collections

import tensorflow as tf
from tensorflow.python.feature_column import feature_column as fc_v1

from tfps.embedding.lookup import combine_padded
from tfps.embedding.merged import Feature, lookup_features
from tfps.embedding.options import EmbeddingOptions


class CategoricalColumnWithEmbedding(collections.namedtuple("CategoricalColumnWithEmbedding",
                                                            ["key", "dtype", "options"])):
    """Ids of feature `key` (any int64/int32 value, or strings) for a tfps embedding_column."""

    @property
    def name(self):
        return self.key

    @property
    def parse_example_spec(self):
        return {self.key: tf.io.VarLenFeature(self.dtype)}

    def sparse_ids(self, inputs):
        """SparseTensor of the feature's ids; dense inputs drop -1 (ints) or '' (strings)."""
        ids = inputs.get(self.key)
        if isinstance(ids, tf.SparseTensor):
            return ids
        ids = tf.convert_to_tensor(ids)
        if ids.shape.rank == 1:
            ids = ids[:, None]
        ignore = tf.constant("" if ids.dtype == tf.string else -1, ids.dtype)
        return _dense_to_sparse(ids, ignore)


def _dense_to_sparse(ids, ignore):
    keep = tf.not_equal(ids, ignore)
    indices = tf.where(keep)
    return tf.SparseTensor(indices, tf.gather_nd(ids, indices), tf.shape(ids, out_type=tf.int64))


def categorical_column_with_embedding(key, dtype=tf.int64, options=None):
    """A categorical column whose ids need no vocabulary and no hash buckets.

    Args:
      key: feature name in the features dict.
      dtype: tf.int64 (int32 accepted) or tf.string (hashed to int64).
      options: tfps.EmbeddingOptions (num_shards, merge).
    """
    if dtype not in (tf.int64, tf.int32, tf.string):
        raise ValueError(f"categorical_column_with_embedding({key!r}): dtype must be int64, int32 or string, "
                         f"got {dtype!r}")
    options = options or EmbeddingOptions()
    if not isinstance(options, EmbeddingOptions):
        raise ValueError(f"categorical_column_with_embedding({key!r}): options must be tfps.EmbeddingOptions, "
                         f"got {type(options).__name__}")
    return CategoricalColumnWithEmbedding(key, dtype, options)


class EmbeddingColumn(fc_v1._DenseColumn,  # pylint: disable=protected-access
                      collections.namedtuple("EmbeddingColumn",
                                             ["categorical_column", "dimension", "combiner", "initializer"])):
    """Dense column: the combined tfps embedding of a CategoricalColumnWithEmbedding, [B, dimension]."""

    @property
    def name(self):
        return f"{self.categorical_column.key}_tfps_embedding"

    @property
    def _var_scope_name(self):
        return self.name

    @property
    def _parse_example_spec(self):
        return self.categorical_column.parse_example_spec

    def _transform_feature(self, inputs):
        return self.categorical_column.sparse_ids(inputs)

    @property
    def _variable_shape(self):
        return tf.TensorShape([self.dimension])

    @property
    def feature(self):
        cat = self.categorical_column
        key_dtype = tf.string if cat.dtype == tf.string else tf.int64
        return Feature(cat.key, self.dimension, self.initializer, key_dtype, cat.options)

    def _get_dense_tensor(self, inputs, weight_collections=None, trainable=None):
        del weight_collections
        sp_ids = inputs.get(self)
        return lookup_features([(self.feature, sp_ids, self.combiner)], insert=trainable is not False,
                               combine=combine_padded)[0]


def embedding_column(categorical_column, dimension, combiner="mean", initializer=None):
    """The embedding of a tfps categorical column, combined per example like
    tf.feature_column.embedding_column (rows without ids are zeros).

    Args:
      categorical_column: from categorical_column_with_embedding.
      dimension: embedding width.
      combiner: "sum", "mean" or "sqrtn".
      initializer: TF initializer, or None for truncated_normal(stddev=1/sqrt(dimension)).
    """
    if not isinstance(categorical_column, CategoricalColumnWithEmbedding):
        raise ValueError("tfps embedding_column needs a tfps.feature_column.categorical_column_with_embedding, "
                         f"got {type(categorical_column).__name__}")
    if combiner not in ("sum", "mean", "sqrtn"):
        raise ValueError(f"embedding_column: combiner must be sum, mean or sqrtn, got {combiner!r}")
    if not isinstance(dimension, int) or dimension <= 0:
        raise ValueError(f"embedding_column: dimension must be a positive int, got {dimension!r}")
    return EmbeddingColumn(categorical_column, dimension, combiner, initializer)


class _Inputs:
    def __init__(self, features):
        self._features = features

    def get(self, key):
        if key not in self._features:
            raise ValueError(f"feature {key!r} is not in the features dict (have {sorted(self._features)})")
        return self._features[key]


def input_layer(features, feature_columns, trainable=True, stats=None, step=None):
    """Like tf.compat.v1.feature_column.input_layer for tfps embedding columns (same output:
    columns sorted by name, concatenated), with one fused lookup per physical table.

    stats: optional dict, filled as tfps.embedding.merged.lookup_features does (ids per step
    with and without cross-feature deduplication). step: the tfps.embedding.TrainingStep of the
    lookups (None: the graph's own; the columns' _get_dense_tensor, which TF's input_layer calls,
    always uses the graph's own)."""
    columns = sorted(feature_columns, key=lambda c: c.name)
    for c in columns:
        if not isinstance(c, EmbeddingColumn):
            raise ValueError(f"tfps.feature_column.input_layer takes tfps embedding columns, got {c!r}")
    inputs = _Inputs(features)
    requests = [(c.feature, c._transform_feature(inputs), c.combiner) for c in columns]
    outs = lookup_features(requests, insert=trainable, stats=stats, combine=combine_padded, step=step)
    return tf.concat(outs, 1)


__all__ = ["CategoricalColumnWithEmbedding", "EmbeddingColumn", "categorical_column_with_embedding",
           "embedding_column", "input_layer"]
