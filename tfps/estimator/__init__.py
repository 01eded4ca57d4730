"""Estimator helpers: the single-process runner, session hooks, incremental checkpoints."""
from tfps.estimator.hooks import (CheckpointSaverHook, EvictionHook, ProgressHook, StepStatsHook, rpc_stats,
                                  step_phases)
from tfps.estimator.incremental import DeltaRestoreHook, IncrementalCheckpoints

__all__ = ["CheckpointSaverHook", "DeltaRestoreHook", "EvictionHook", "IncrementalCheckpoints", "ProgressHook",
           "StepStatsHook", "rpc_stats", "step_phases"]
