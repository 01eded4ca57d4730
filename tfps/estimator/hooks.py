"""The session hooks, now in tfps.runner.hooks (the same objects; this name stays for Estimator users)."""
from tfps.runner.hooks import (CheckpointSaverHook, EvalProgressHook, EvictionHook, ProgressHook,  # noqa: F401
                               StepStatsHook, cross_task_messages, duration, rpc_stats, step_phases)
