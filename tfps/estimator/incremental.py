"""Delta checkpoints, now in tfps.runner.incremental (the same objects; this name stays for Estimator users)."""
from tfps.runner.incremental import DeltaRestoreHook, IncrementalCheckpoints, delta_files  # noqa: F401
