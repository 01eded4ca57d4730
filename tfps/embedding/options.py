"""Typed per-feature embedding options."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class EmbeddingOptions:
    """Options of a feature's embedding table.

    num_shards: tables the feature's rows are spread over (key x in shard floormod(x, k)).
    merge: share one physical table with every other feature of equal dim, key dtype,
      initializer and options (ids are feature-tagged, see tfps.ops.unique_partition.feature_tag).
    """
    num_shards: int = 1
    merge: bool = True

    def __post_init__(self):
        if not isinstance(self.num_shards, int) or self.num_shards <= 0:
            raise ValueError(f"EmbeddingOptions: num_shards must be a positive int, got {self.num_shards!r}")
        if not isinstance(self.merge, bool):
            raise ValueError(f"EmbeddingOptions: merge must be a bool, got {self.merge!r}")

    def table_key(self):
        """The fields that must match for two features to share a table (all but merge)."""
        return (self.num_shards,)
