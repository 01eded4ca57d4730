#include "kernels/core/gather.h"

#include <algorithm>
#include <cstring>

#include <immintrin.h>

#include "kernels/core/config.h"
#include "kernels/core/parallel.h"
#include "kernels/core/scatter_lines.h"
#include "kernels/core/unique.h"

namespace tfps {
namespace core {

int64_t CheckIndices(const int32_t* idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= rows) return i;
  }
  return -1;
}

void GatherRows(const float* params, int64_t dim, const int32_t* idx, int64_t n, float* out) {
  const bool stream = dim % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  ParallelRange(n, [&](int64_t begin, int64_t end) {
    if (!stream) {
      for (int64_t i = begin; i < end; ++i) {
        std::memcpy(out + i * dim, params + static_cast<int64_t>(idx[i]) * dim, sizeof(float) * dim);
      }
      return;
    }
    for (int64_t i = begin; i < end; ++i) {
      const float* src = params + static_cast<int64_t>(idx[i]) * dim;
      float* dst = out + i * dim;
      StoreRowOnce(dst, src, dim);
    }
    _mm_sfence();
  });
}

namespace {
void AddRows(const float* data, int64_t dim, const int32_t* idx, int64_t begin, int64_t end, float* out) {
  for (int64_t i = begin; i < end; ++i) {
    float* dst = out + static_cast<int64_t>(idx[i]) * dim;
    const float* src = data + i * dim;
    for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
  }
}
}  // namespace

int64_t ScatterAddScratch(int64_t n, int64_t rows, int64_t dim) {
  return n < kParallelThreshold ? 0 : (ParallelParts() - 1) * rows * dim;
}

void ScatterAddRows(const float* data, int64_t dim, const int32_t* idx, int64_t n, int64_t rows, float* out,
                    float* scratch) {
  std::fill(out, out + rows * dim, 0.f);
  if (n < kParallelThreshold) {
    AddRows(data, dim, idx, 0, n, out);
    return;
  }
  // Part 0 sums into out, part p > 0 into scratch's (p - 1)-th buffer, added at the end.
  const int parts = ParallelParts();
  const int64_t size = rows * dim;
  ParallelPieces(n, parts, [&](int p, int64_t begin, int64_t end) {
    float* acc = p == 0 ? out : scratch + (p - 1) * size;
    if (p > 0) std::fill(acc, acc + size, 0.f);
    AddRows(data, dim, idx, begin, end, acc);
  });
  for (int p = 1; p < parts; ++p) {
    const float* part = scratch + (p - 1) * size;
    ParallelRange(size, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) out[k] += part[k];
    });
  }
}

}  // namespace core
}  // namespace tfps
