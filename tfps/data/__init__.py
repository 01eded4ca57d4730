"""Data: the synthetic Criteo-shaped generator with a planted model, and the Criteo text reader."""
from tfps.data.criteo import criteo_dataset
from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, auc

__all__ = ["SyntheticConfig", "SyntheticCriteo", "auc", "criteo_dataset"]
