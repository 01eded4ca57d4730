"""One task of a TF_CONFIG cluster: now tfps.runner.cluster, on tfps's own runner (this name stays)."""
from tfps.runner.cluster import run_task  # noqa: F401
from tfps.runner.task import PEER_TIMEOUT_EXIT  # noqa: F401
