"""Estimator helpers: the single-process runner, session hooks, incremental checkpoints."""
from tfps.estimator.hooks import EvictionHook, ProgressHook
from tfps.estimator.incremental import DeltaRestoreHook, IncrementalCheckpoints

__all__ = ["DeltaRestoreHook", "EvictionHook", "IncrementalCheckpoints", "ProgressHook"]
