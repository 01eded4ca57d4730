#include "kernels/core/prefetch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tfps {
namespace core {
namespace {

PrefetchMode FromEnvironment() {
  const char* v = std::getenv("TFPS_PREFETCH");
  if (v == nullptr) return PrefetchMode::kRolling;
  if (std::strcmp(v, "off") == 0) return PrefetchMode::kOff;
  if (std::strcmp(v, "group") == 0) return PrefetchMode::kGroup;
  return PrefetchMode::kRolling;  // "rolling", or a value it does not know: the default
}

std::atomic<int>& Mode() {
  static std::atomic<int> mode{static_cast<int>(FromEnvironment())};
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
