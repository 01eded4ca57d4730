"""Typed per-feature embedding options."""
import dataclasses
from typing import Optional


MAX_SHARDS = 1024                 # tables per feature: each shard adds ops to the graph (512 build in 15 s)
MAX_SKETCH_WIDTH = 1 << 26        # kernels/core/config.h kMaxSketchWidth


@dataclasses.dataclass(frozen=True)
class EmbeddingOptions:
    """Options of a feature's embedding table.

    num_shards: tables the feature's rows are spread over (key x in shard floormod(x, k)).
    merge: share one physical table with every other feature of equal dim, key dtype,
      initializer and options (ids are feature-tagged, see tfps.ops.feature_tag).
    admit_min_count: a new id gets a row only after this many sightings in training lookups
      (1: at once); until then its lookup returns the initializer value and its gradient is
      dropped. Sightings are counted in a count-min sketch of fixed size per table shard
      (admit_sketch_width x 4 16-bit counters), saved in checkpoints: memory stays bounded whatever
      the rate of new ids, and no count is forgotten or under-estimated.
    admit_sketch_width: counters per sketch row (a power of two; 4 rows of 16-bit counters, so
      8 MiB per table shard at the default 2^20). A sketch over-counts when far more keys are
      pending at once than it has counters: false admissions stay rare (under 1%) while the
      keys pending at once are under width / 4.
    Eviction, for online learning (None: rule off; a row goes if any rule selects it; run by
    tfps.estimator.EvictionHook or EmbeddingVariable.evict):
    evict_after_steps: rows not updated for more than this many global steps.
    evict_min_freq: rows with fewer training updates than this.
    evict_l2_below: rows whose value has an L2 norm below this.
    max_rows: then keep at most this many rows (over all shards), dropping the least frequently
      (cap_policy="lfu") or least recently ("lru") updated.
    """
    num_shards: int = 1
    merge: bool = True
    admit_min_count: int = 1
    admit_sketch_width: int = 2**20
    evict_after_steps: Optional[int] = None
    evict_min_freq: Optional[int] = None
    evict_l2_below: Optional[float] = None
    max_rows: Optional[int] = None
    cap_policy: str = "lfu"

    def __post_init__(self):
        if not isinstance(self.num_shards, int) or isinstance(self.num_shards, bool) or \
                not 1 <= self.num_shards <= MAX_SHARDS:
            raise ValueError(f"EmbeddingOptions: num_shards must be an int in [1, {MAX_SHARDS}], got "
                             f"{self.num_shards!r}")
        if not isinstance(self.merge, bool):
            raise ValueError(f"EmbeddingOptions: merge must be a bool, got {self.merge!r}")
        if not isinstance(self.admit_min_count, int) or isinstance(self.admit_min_count, bool) \
                or self.admit_min_count < 1:
            raise ValueError(f"EmbeddingOptions: admit_min_count must be an int >= 1, got {self.admit_min_count!r}")
        w = self.admit_sketch_width
        if not isinstance(w, int) or isinstance(w, bool) or w < 2**12 or w > MAX_SKETCH_WIDTH or w & (w - 1):
            raise ValueError(f"EmbeddingOptions: admit_sketch_width must be a power of two in [2^12, 2^26], got {w!r}")
        for field in ("evict_after_steps", "evict_min_freq", "max_rows"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"EmbeddingOptions: {field} must be None or an int >= 0, got {value!r}")
        if self.evict_l2_below is not None and (not isinstance(self.evict_l2_below, (int, float))
                                                or self.evict_l2_below < 0):
            raise ValueError(f"EmbeddingOptions: evict_l2_below must be None or >= 0, got {self.evict_l2_below!r}")
        if self.cap_policy not in ("lfu", "lru"):
            raise ValueError(f"EmbeddingOptions: cap_policy must be 'lfu' or 'lru', got {self.cap_policy!r}")

    @property
    def evicts(self):
        return any(v is not None for v in (self.evict_after_steps, self.evict_min_freq, self.evict_l2_below,
                                           self.max_rows))

    def table_key(self):
        """The fields that must match for two features to share a table (all but merge and
        num_shards); none of them is part of the table's name."""
        return (self.admit_min_count, self.admit_sketch_width, self.evict_after_steps, self.evict_min_freq, self.evict_l2_below,
                self.max_rows, self.cap_policy)
