// Inverse-CDF sampling over a sorted table of cumulative probabilities, with a guide table:
// Ranks(u) is, for each u, the number of cdf values <= u -- exactly numpy's
// searchsorted(cdf, u, side="right") -- found by a binary search within the few values between
// two guide points instead of the whole table (the synthetic data's Zipf ranks: 26 features of
// up to 2*10^5 ranks a row, tfps/data/synthetic.py).
#ifndef TFPS_KERNELS_CORE_CDF_SAMPLER_H_
#define TFPS_KERNELS_CORE_CDF_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace tfps {
namespace core {

class CdfSampler {
 public:
  // cdf: non-decreasing (not checked here: the binding checks it).
  explicit CdfSampler(std::vector<double> cdf, int guide_bits = 12);
  void Ranks(const double* u, int64_t n, int64_t* out) const;
  int64_t size() const { return static_cast<int64_t>(cdf_.size()); }

 private:
  std::vector<double> cdf_;
  std::vector<int64_t> guide_;   // guide_[b]: the values <= b / G, b = 0..G
  double scale_;                  // G, a power of two: u * G and b / G are exact
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_CDF_SAMPLER_H_
