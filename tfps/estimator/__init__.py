"""Estimator helpers: the single-process runner and session hooks."""
from tfps.estimator.hooks import ProgressHook

__all__ = ["ProgressHook"]
