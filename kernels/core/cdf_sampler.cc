#include "kernels/core/cdf_sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace tfps {
namespace core {

CdfSampler::CdfSampler(std::vector<double> cdf, int guide_bits)
    : cdf_(std::move(cdf)), scale_(std::ldexp(1.0, guide_bits)) {
  const int64_t buckets = int64_t{1} << guide_bits;
  guide_.resize(buckets + 1);
  for (int64_t b = 0; b <= buckets; ++b) {
    guide_[b] = std::upper_bound(cdf_.begin(), cdf_.end(), static_cast<double>(b) / scale_) - cdf_.begin();
  }
}

void CdfSampler::Ranks(const double* u, int64_t n, int64_t* out) const {
  const double* begin = cdf_.data();
  const int64_t buckets = static_cast<int64_t>(guide_.size()) - 1;
  for (int64_t i = 0; i < n; ++i) {
    const double v = u[i];
    int64_t lo = 0, hi = size();
    if (v >= 0.0 && v < 1.0) {   // in bucket b: between the values <= b / G and those <= (b + 1) / G
      const int64_t b = std::min(static_cast<int64_t>(v * scale_), buckets - 1);
      lo = guide_[b];
      hi = guide_[b + 1];
    }
    out[i] = std::upper_bound(begin + lo, begin + hi, v) - begin;
  }
}

}  // namespace core
}  // namespace tfps
