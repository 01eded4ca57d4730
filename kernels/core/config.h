// Tunables of the tfps core, one place, one doc line each.
#ifndef TFPS_KERNELS_CORE_CONFIG_H_
#define TFPS_KERNELS_CORE_CONFIG_H_

#include <cstdint>

namespace tfps {
namespace core {

// log2 of the number of index shards per table; each shard has its own
// reader-writer lock, so 64 shards keep two threads from meeting.
constexpr int kShardBits = 6;
// Initial capacity (slots) of one index shard; grows by doubling.
constexpr int64_t kShardInitialCapacity = 16;
// An index shard doubles when size exceeds this fraction of capacity.
constexpr double kMaxLoadFactor = 0.8;
// Rows carved from one BucketPool block (a block is rows * stride floats).
constexpr int64_t kRowsPerBlock = 4096;
// Batches of at least this many keys are split over threads (tbb::parallel_for).
constexpr int64_t kParallelThreshold = 16384;
// Grain of tbb::parallel_for over keys.
constexpr int64_t kParallelGrain = 4096;
// Attempts of the truncated-normal initializer before it clamps to 2 stddev.
constexpr int kTruncatedNormalMaxAttempts = 64;

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_CONFIG_H_
