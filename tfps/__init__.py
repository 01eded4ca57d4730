"""tfps: a TF1-style parameter-server trainer with dynamic hash-table embeddings.

Every name is imported on first use (PEP 562): `import tfps.config` or `tfps --help` imports no
TensorFlow; `tfps.get_embedding_variable` and the rest load it as they are used. In a process that
has imported TensorFlow, `import tfps` also registers tfps's ops (what a PS task, or a process
loading a SavedModel with tfps tables, needs); elsewhere `tfps.ops.load()` does."""
import sys

from tfps._lazy import attach

__version__ = "0.1.0"

_NAMES = {
    **{name: f"tfps.{name}" for name in ("cluster", "data", "estimator", "feature_column", "ops", "pipeline",
                                         "runner", "state", "train")},
    **{name: "tfps.embedding" for name in ("EmbeddingVariable", "embedding_lookup", "embedding_lookup_sparse",
                                           "embedding_variables", "get_embedding_variable",
                                           "trainable_embedding_variables", "TrainingStep", "ModelGraph")},
    "EmbeddingOptions": "tfps.embedding.options",
}
__getattr__, __dir__ = attach(__name__, _NAMES)

__all__ = ["EmbeddingOptions", "EmbeddingVariable", "ModelGraph", "TrainingStep", "embedding_lookup",
           "embedding_lookup_sparse", "cluster", "data", "embedding_variables", "estimator", "feature_column",
           "get_embedding_variable", "ops", "pipeline", "runner", "state", "train", "trainable_embedding_variables"]

if "tensorflow" in sys.modules:   # registers the op library: a server or a SavedModel load can run tfps ops
    import tfps.ops  # noqa: E402,F401
