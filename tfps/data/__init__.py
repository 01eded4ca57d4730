"""Data: readers for Criteo text logs, MovieLens ratings and TFRecords of tf.train.Example; the
synthetic generator with a planted model; the sources a config names; token-budget batching."""
from tfps.data.balance import balance_by_tokens
from tfps.data.criteo import criteo_dataset
from tfps.data.movielens import movielens_dataset
from tfps.data.schema import Schema, share
from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, auc
from tfps.data.tfrecord import tfrecord_dataset, write_tfrecords
from tfps.pipeline.dataset import PipelineDataset

__all__ = ["PipelineDataset", "balance_by_tokens", "Schema", "SyntheticConfig", "SyntheticCriteo", "auc", "criteo_dataset", "movielens_dataset", "share",
           "tfrecord_dataset", "write_tfrecords"]
