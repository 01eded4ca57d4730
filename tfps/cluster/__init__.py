"""Cluster tooling: TF_CONFIG, load-balanced placement, graph checks for placed graphs."""
from tfps.cluster.graph_check import CrossRead, cross_device_reads
from tfps.cluster.placement import LoadBalancedStrategy, replica_device_setter
from tfps.cluster.tf_config import ClusterConfig, ClusterConfigError, parse_tf_config

__all__ = ["ClusterConfig", "ClusterConfigError", "CrossRead", "LoadBalancedStrategy", "cross_device_reads",
           "parse_tf_config", "replica_device_setter"]
