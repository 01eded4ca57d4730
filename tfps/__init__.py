"""tfps: a TF1-style parameter-server trainer with dynamic hash-table embeddings."""
from tfps import ops, train
from tfps.embedding import (EmbeddingVariable, embedding_lookup, embedding_lookup_sparse, embedding_variables,
                            get_embedding_variable, trainable_embedding_variables)

__version__ = "0.1.0"

__all__ = ["EmbeddingVariable", "embedding_lookup", "embedding_lookup_sparse", "embedding_variables", "ops",
           "get_embedding_variable", "train", "trainable_embedding_variables"]
