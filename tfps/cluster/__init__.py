"""Cluster tooling: TF_CONFIG, load-balanced placement, graph checks for placed graphs. Names are
imported on first use (PEP 562): TF_CONFIG parsing needs no TensorFlow."""
from tfps._lazy import attach

_NAMES = {"ClusterConfig": "tfps.cluster.tf_config", "ClusterConfigError": "tfps.cluster.tf_config",
          "parse_tf_config": "tfps.cluster.tf_config", "CrossRead": "tfps.cluster.graph_check",
          "cross_device_reads": "tfps.cluster.graph_check", "LoadBalancedStrategy": "tfps.cluster.placement",
          "replica_device_setter": "tfps.cluster.placement"}
__getattr__, __dir__ = attach(__name__, _NAMES)

__all__ = ["ClusterConfig", "ClusterConfigError", "CrossRead", "LoadBalancedStrategy", "cross_device_reads",
           "parse_tf_config", "replica_device_setter"]
