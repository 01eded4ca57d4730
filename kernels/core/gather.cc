#include "kernels/core/gather.h"

#include <cstring>

#include <immintrin.h>

#include "kernels/core/parallel.h"

namespace tfps {
namespace core {

int64_t CheckIndices(const int32_t* idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= rows) return i;
  }
  return -1;
}

void GatherRows(const float* params, int64_t dim, const int32_t* idx, int64_t n, float* out) {
  const bool stream = dim % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(params) % 16 == 0;
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
      for (int64_t j = 0; j < dim; j += 4) _mm_stream_ps(dst + j, _mm_load_ps(src + j));
    }
    _mm_sfence();
  });
}

}  // namespace core
}  // namespace tfps
