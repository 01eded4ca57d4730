// Deduplication of a batch of int64 ids: unique ids in order of first
// occurrence, the inverse map and a count per unique id. Thread-safe (no shared
// state); the caller owns the buffers.
//
// Algorithm: below kParallelThreshold one linear-probing set. Above it the
// batch is cut into kUniqueParts contiguous pieces deduplicated in parallel,
// then the pieces' unique ids are merged into piece 0's set in piece order
// (which keeps global first-occurrence order) and each later piece's inverse
// is remapped through a small table, in parallel.
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
