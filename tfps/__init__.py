"""tfps: a TF1-style parameter-server trainer with dynamic hash-table embeddings."""
from tfps import cluster, data, estimator, feature_column, ops, pipeline, state, train
from tfps.embedding import (EmbeddingVariable, embedding_lookup, embedding_lookup_sparse, embedding_variables,
                            get_embedding_variable, trainable_embedding_variables)
from tfps.embedding.options import EmbeddingOptions

__version__ = "0.1.0"

__all__ = ["EmbeddingOptions", "EmbeddingVariable", "embedding_lookup", "embedding_lookup_sparse",
           "cluster", "data", "embedding_variables", "estimator", "feature_column", "get_embedding_variable", "ops",
           "pipeline", "state", "train", "trainable_embedding_variables"]
