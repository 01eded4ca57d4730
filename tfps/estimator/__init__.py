"""Estimator helpers: the single-process runner and session hooks."""
from tfps.estimator.hooks import EvictionHook, ProgressHook

__all__ = ["EvictionHook", "ProgressHook"]
