// CRC-32C (Castagnoli), as TensorFlow's checkpoint bundles store it: Extend() over a stream in
// pieces, and Mask()/Unmask() (a bundle entry keeps the masked value). SSE4.2's crc32
// instruction where the CPU has it, a table otherwise; the same result either way.
#ifndef TFPS_KERNELS_CORE_CRC32C_H_
#define TFPS_KERNELS_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace tfps {
namespace core {
namespace crc32c {

// The CRC of [data, data + n) following a stream whose CRC so far is `crc` (0 at the start).
uint32_t Extend(uint32_t crc, const char* data, size_t n);

inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_CRC32C_H_
