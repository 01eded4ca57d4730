// Row gather out[i] = params[idx[i]] for float rows of width dim, and its adjoint.
// Thread-safe (pure over caller-owned buffers).
//
// The output of an embedding lookup is large (a million ids x 16 floats is 64 MB)
// and is not read back soon, so rows are written with non-temporal (streaming)
// stores when out is 16-byte aligned and dim % 4 == 0: this skips the
// read-for-ownership of every output cache line. Parallel above kParallelThreshold.
#ifndef TFPS_KERNELS_CORE_GATHER_H_
#define TFPS_KERNELS_CORE_GATHER_H_

#include <cstdint>

namespace tfps {
namespace core {

// idx values must be in [0, rows); returns the first offending position or -1.
int64_t CheckIndices(const int32_t* idx, int64_t n, int64_t rows);

void GatherRows(const float* params, int64_t dim, const int32_t* idx, int64_t n, float* out);

// The adjoint of GatherRows: out[u] = sum of data[i] over i with idx[i] == u, for
// out [rows, dim] (zeroed here). Large inputs are split over ParallelParts() threads, each
// summing into its own buffer, then added (single-threaded TF UnsortedSegmentSum was the
// largest op of a merged embedding step). The buffers are `scratch`, ScatterAddScratch(n, rows,
// dim) floats that the caller allocates (the op through TF's allocator, so running out of memory
// is a ResourceExhausted status, never an exception inside a worker thread); nothing here allocates.
int64_t ScatterAddScratch(int64_t n, int64_t rows, int64_t dim);
void ScatterAddRows(const float* data, int64_t dim, const int32_t* idx, int64_t n, int64_t rows, float* out,
                    float* scratch);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_GATHER_H_
