// 64-bit mixing used for shard choice, index slots and initial values.
// Thread-safe (pure functions).
#ifndef TFPS_KERNELS_CORE_HASH_H_
#define TFPS_KERNELS_CORE_HASH_H_

#include <cstdint>

namespace tfps {
namespace core {

// The splitmix64 finalizer: a bijection on uint64 with full avalanche.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t HashKey(int64_t key) { return Mix64(static_cast<uint64_t>(key)); }

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_HASH_H_
