// ShardOrder: a batch's key positions grouped by index shard, so that a batch takes each
// shard's lock once and probes its keys back to back (its part of the index stays in cache).
// A key's shard is the high kShardBits of its hash (IndexShardOf). Within a shard positions
// ascend, so a key repeated in the batch is met in batch order.
//
// A stable counting sort. A large batch (kParallelSortMinKeys) is hashed, counted and
// scattered by ParallelParts() pieces, piece p's keys of a shard placed after those of pieces
// < p. (Done by one thread, this took 16% of the CPU samples of a 2^20-key lookup while the
// other core waited.) A sort that streams its output (kStreamMinBytes) goes through line
// buffers (scatter_lines.h); a smaller one stores directly into lines that stay in cache.
// Immutable once built; the constructor may throw std::bad_alloc.
#ifndef TFPS_KERNELS_CORE_SHARD_ORDER_H_
#define TFPS_KERNELS_CORE_SHARD_ORDER_H_

#include <cstdint>

#include "kernels/core/config.h"
#include "kernels/core/scatter_lines.h"

namespace tfps {
namespace core {

constexpr int kNumIndexShards = 1 << kShardBits;

inline int IndexShardOf(uint64_t h) { return static_cast<int>(h >> (64 - kShardBits)); }

class ShardOrder {
 public:
  // keys[0..n), n >= 1.
  ShardOrder(const int64_t* keys, int64_t n);
  ShardOrder(const ShardOrder&) = delete;
  ShardOrder& operator=(const ShardOrder&) = delete;

  // Shard s's keys: count(s) positions in keys, ascending, and their hashes (HashKey).
  int64_t count(int s) const { return begin_[s + 1] - begin_[s]; }
  const int64_t* idx(int s) const { return order_.get() + begin_[s]; }
  const uint64_t* hashes(int s) const { return sorted_h_.get() + begin_[s]; }

 private:
  LineAligned<uint64_t> sorted_h_;
  LineAligned<int64_t> order_;
  int64_t begin_[kNumIndexShards + 1];
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_SHARD_ORDER_H_
