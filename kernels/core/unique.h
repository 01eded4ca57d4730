// Deduplication of a batch of int64 ids: unique ids, the inverse map and a
// count per unique id. Thread-safe (no shared state); the caller owns buffers.
//
// Order: with n < kParallelThreshold, unique ids come in order of first
// occurrence. Above it the ids are split into kUniqueParts parts by the top
// bits of Mix64(id), each part deduplicated by its own thread in order of
// first occurrence, and the parts concatenated (part 0 first) -- a fixed,
// machine-independent order.
#ifndef TFPS_KERNELS_CORE_UNIQUE_H_
#define TFPS_KERNELS_CORE_UNIQUE_H_

#include <cstdint>
#include <vector>

namespace tfps {
namespace core {

constexpr int kUniqueParts = 2;

// inverse: [n] output; uniq and counts are resized to the number of unique ids.
void UniqueWithCounts(const int64_t* ids, int64_t n, int32_t* inverse, std::vector<int64_t>* uniq,
                      std::vector<int32_t>* counts);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_UNIQUE_H_
