"""Hash-table embedding variables: creation, lookups, checkpointing."""
from tfps.embedding.lookup import embedding_lookup, embedding_lookup_sparse
from tfps.embedding.model_graph import ModelGraph, Stager, TableLookup, TrainingStep
from tfps.embedding.variable import (EmbeddingVariable, TableShard, embedding_variables,
                                     get_embedding_variable, trainable_embedding_variables)

__all__ = ["EmbeddingVariable", "ModelGraph", "Stager", "TableLookup", "TableShard", "TrainingStep", "embedding_lookup",
           "embedding_lookup_sparse", "embedding_variables", "get_embedding_variable", "trainable_embedding_variables"]
