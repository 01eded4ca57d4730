"""Data: readers for Criteo text logs, MovieLens ratings and TFRecords of tf.train.Example; the
synthetic generator with a planted model; the sources a config names; token-budget batching.
Names are imported on first use (PEP 562): the synthetic generator needs no TensorFlow."""
from tfps._lazy import attach

_NAMES = {"balance_by_tokens": "tfps.data.balance", "criteo_dataset": "tfps.data.criteo",
          "movielens_dataset": "tfps.data.movielens", "Schema": "tfps.data.schema", "share": "tfps.data.schema",
          "SyntheticConfig": "tfps.data.synthetic", "SyntheticCriteo": "tfps.data.synthetic",
          "auc": "tfps.data.synthetic", "tfrecord_dataset": "tfps.data.tfrecord",
          "write_tfrecords": "tfps.data.tfrecord", "PipelineDataset": "tfps.pipeline.dataset"}
__getattr__, __dir__ = attach(__name__, _NAMES)

__all__ = ["PipelineDataset", "balance_by_tokens", "Schema", "SyntheticConfig", "SyntheticCriteo", "auc",
           "criteo_dataset", "movielens_dataset", "share", "tfrecord_dataset", "write_tfrecords"]
