"""Data: the synthetic Criteo-shaped generator with a planted model."""
from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, auc

__all__ = ["SyntheticConfig", "SyntheticCriteo", "auc"]
