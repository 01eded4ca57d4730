#include "kernels/core/eviction.h"

#include <algorithm>

namespace tfps {
namespace core {

std::vector<int64_t> Eviction::OverCap() {
  std::vector<int64_t> keys;
  const int64_t excess = static_cast<int64_t>(score_.size()) - policy_.max_rows;
  if (excess > 0) {
    std::nth_element(score_.begin(), score_.begin() + excess, score_.end());
    for (int64_t k = 0; k < excess; ++k) keys.push_back(score_[k].second);
  }
  std::vector<std::pair<uint32_t, int64_t>>().swap(score_);
  return keys;
}

}  // namespace core
}  // namespace tfps
