#include "kernels/core/gather.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

void ScatterAddRows(const float* data, int64_t dim, const int32_t* idx, int64_t n, int64_t rows, float* out) {
  std::fill(out, out + rows * dim, 0.f);
  if (n < kParallelThreshold) {
    AddRows(data, dim, idx, 0, n, out);
    return;
  }
  // Part 0 sums into out, the others into buffers of their own, added at the end.
  const int parts = ParallelParts();
  std::vector<std::vector<float>> partial(parts - 1);
  ParallelPieces(n, parts, [&](int p, int64_t begin, int64_t end) {
    float* acc = out;
    if (p > 0) {
      partial[p - 1].assign(rows * dim, 0.f);
      acc = partial[p - 1].data();
    }
    AddRows(data, dim, idx, begin, end, acc);
  });
  for (const auto& part : partial) {
    ParallelRange(rows * dim, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) out[k] += part[k];
    });
  }
}

}  // namespace core
}  // namespace tfps
