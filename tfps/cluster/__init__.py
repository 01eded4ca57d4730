"""Cluster tooling: load-balanced placement, graph checks for placed graphs."""
from tfps.cluster.graph_check import CrossRead, cross_device_reads
from tfps.cluster.placement import LoadBalancedStrategy, replica_device_setter

__all__ = ["CrossRead", "LoadBalancedStrategy", "cross_device_reads", "replica_device_setter"]
