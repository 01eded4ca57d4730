"""Op wrappers. Importing tfps registers the ops (so a SavedModel with tfps tables loads after
`import tfps` alone).

    uids, inverse, offsets = tfps.ops.unique_partition(ids, num_partitions=4, strategy="mod")
"""
from tfps.ops._loader import load
from tfps.ops.unique_partition_ops import (feature_tag, feature_untag, unique_partition,
                                           unique_partition_with_counts)

__all__ = ["feature_tag", "feature_untag", "load", "unique_partition", "unique_partition_with_counts"]

load()
