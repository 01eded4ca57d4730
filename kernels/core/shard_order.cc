#include "kernels/core/shard_order.h"

#include <memory>
#include <vector>

#include "kernels/core/hash.h"
#include "kernels/core/parallel.h"

namespace tfps {
namespace core {

ShardOrder::ShardOrder(const int64_t* keys, int64_t n) : sorted_h_(n), order_(n) {
  constexpr int kShards = kNumIndexShards;
  const int parts = n < kParallelSortMinKeys ? 1 : ParallelParts();
  std::unique_ptr<uint64_t[]> hashes(new uint64_t[n]);
  // [part][shard], each part's counters two cache lines from the next part's: two threads
  // counting into one line would pass it back and forth on every key.
  constexpr size_t kStride = kShards + 2 * kPerLine;
  std::vector<int64_t> fill(parts * kStride, 0);
  // Allocated before the threads start: nothing throws inside them.
  const bool stream = n * static_cast<int64_t>(sizeof(int64_t) + sizeof(uint64_t)) >= kStreamMinBytes;
  std::vector<std::unique_ptr<ScatterLines<kShards>>> lines(stream ? parts : 0);
  for (size_t p = 0; p < lines.size(); ++p) {
    lines[p] = std::make_unique<ScatterLines<kShards>>(&fill[p * kStride], order_.get(), sorted_h_.get());
  }
  ParallelPieces(n, parts, [&](int p, int64_t lo, int64_t hi) {
    int64_t* count = &fill[p * kStride];
    for (int64_t i = lo; i < hi; ++i) {
      hashes[i] = HashKey(keys[i]);
      ++count[IndexShardOf(hashes[i])];
    }
  });
  int64_t at = 0;
  for (int s = 0; s < kShards; ++s) {
    begin_[s] = at;
    for (int p = 0; p < parts; ++p) {
      const int64_t c = fill[p * kStride + s];
      fill[p * kStride + s] = at;  // where piece p's keys of shard s start
      at += c;
    }
  }
  begin_[kShards] = at;
  ParallelPieces(n, parts, [&](int p, int64_t lo, int64_t hi) {
    if (stream) {
      for (int64_t i = lo; i < hi; ++i) lines[p]->Put(IndexShardOf(hashes[i]), i, hashes[i]);
      lines[p]->Flush();
      return;
    }
    int64_t* next = &fill[p * kStride];
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t to = next[IndexShardOf(hashes[i])]++;
      order_.get()[to] = i;
      sorted_h_.get()[to] = hashes[i];
    }
  });
}

}  // namespace core
}  // namespace tfps
