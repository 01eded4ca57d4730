"""The session hooks, now in tfps.runner.hooks (the same objects; this name stays for Estimator users)."""
from tfps.runner.hooks import (CheckpointSaverHook, EvalProgressHook, EvictionHook, ProgressHook,  # noqa: F401
                               StepStatsHook, duration)
from tfps.runner.step_trace import cross_task_messages, rpc_stats, step_phases  # noqa: F401
