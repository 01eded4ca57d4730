"""Cluster tooling: graph checks for placed graphs."""
from tfps.cluster.graph_check import CrossRead, cross_device_reads

__all__ = ["CrossRead", "cross_device_reads"]
