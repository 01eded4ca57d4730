// Software prefetching for the table's batch paths (the mode switch is in config.h).
// PrefetchLines only hints the cache (thread-safe); each table keeps its own mode.
#ifndef TFPS_KERNELS_CORE_PREFETCH_H_
#define TFPS_KERNELS_CORE_PREFETCH_H_

#include <cstddef>
#include <cstdint>

#include "kernels/core/config.h"

namespace tfps {
namespace core {

constexpr uintptr_t kCacheLine = 64;

// Asks for every cache line of [p, p + bytes) (at least the first).
inline void PrefetchLines(const void* p, size_t bytes) {
  uintptr_t line = reinterpret_cast<uintptr_t>(p) & ~(kCacheLine - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  do {
    __builtin_prefetch(reinterpret_cast<const void*>(line));
    line += kCacheLine;
  } while (line < end);
}

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_PREFETCH_H_
