// Unit tests of ShardOrder (shard_order.h) against a stable grouping of the positions by shard,
// at the sizes that switch its paths: one piece, pieces over threads, streamed stores.
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/core/hash.h"
#include "kernels/core/shard_order.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(ShardOrder, ShardOrderGroupsPositionsByShardInBatchOrder) {
  for (const int64_t n : {int64_t{1}, int64_t{100}, kParallelThreshold + 3, kParallelSortMinKeys + 5,
                          kStreamMinBytes / 16 + 77}) {
    std::mt19937_64 rng(static_cast<uint64_t>(n));
    std::vector<int64_t> keys(n);
    for (auto& k : keys) k = static_cast<int64_t>(rng() % (n / 2 + 1));  // keys repeat
    std::vector<std::vector<int64_t>> want(kNumIndexShards);
    for (int64_t i = 0; i < n; ++i) want[IndexShardOf(HashKey(keys[i]))].push_back(i);
    const ShardOrder order(keys.data(), n);
    int64_t total = 0;
    for (int s = 0; s < kNumIndexShards; ++s) {
      CHECK_EQ(order.count(s), static_cast<int64_t>(want[s].size()));
      for (int64_t j = 0; j < order.count(s); ++j) {
        CHECK_EQ(order.idx(s)[j], want[s][j]);
        CHECK_EQ(order.hashes(s)[j], HashKey(keys[want[s][j]]));
      }
      total += order.count(s);
    }
    CHECK_EQ(total, n);
  }
  CHECK_EQ(IndexShardOf(~uint64_t{0}), kNumIndexShards - 1);
  CHECK_EQ(IndexShardOf(uint64_t{1} << (64 - kShardBits)), 1);
}
