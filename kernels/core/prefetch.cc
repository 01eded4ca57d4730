#include "kernels/core/prefetch.h"

#include <atomic>

namespace tfps {
namespace core {
namespace {

std::atomic<int>& Mode() {
  static std::atomic<int> mode{static_cast<int>(PrefetchMode::kRolling)};
  return mode;
}

std::atomic<int64_t>& MinShardBytes() {
  static std::atomic<int64_t> bytes{kPrefetchMinShardBytes};
  return bytes;
}

}  // namespace

int64_t GetPrefetchMinShardBytes() { return MinShardBytes().load(std::memory_order_relaxed); }

void SetPrefetchMinShardBytes(int64_t bytes) { MinShardBytes().store(bytes, std::memory_order_relaxed); }

PrefetchMode GetPrefetchMode() { return static_cast<PrefetchMode>(Mode().load(std::memory_order_relaxed)); }

void SetPrefetchMode(PrefetchMode mode) { Mode().store(static_cast<int>(mode), std::memory_order_relaxed); }

}  // namespace core
}  // namespace tfps
