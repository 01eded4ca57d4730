#include "kernels/core/eviction.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

namespace tfps {
namespace core {
namespace {

template <typename T>
T NonNegative(T v, const char* what) {
  if (!(v >= 0)) throw std::invalid_argument(std::string(what) + " must be >= 0, got " + std::to_string(v));
  return v;
}

}  // namespace

IdleRows::IdleRows(int64_t after_steps) : after_steps_(NonNegative(after_steps, "after_steps")) {}

RareRows::RareRows(int64_t min_freq) : min_freq_(NonNegative(min_freq, "min_freq")) {}

SmallRows::SmallRows(float l2_below) : l2_below_(NonNegative(l2_below, "l2_below")) {}

bool SmallRows::Selects(const RowView& row, int64_t) const {
  double sq = 0;
  for (int64_t j = 0; j < row.dim; ++j) sq += static_cast<double>(row.value[j]) * row.value[j];
  return sq < l2_below_ * l2_below_;
}

RowCap::RowCap(int64_t max_rows) : max_rows_(NonNegative(max_rows, "max_rows")) {}

void RowCap::Ranked() {
  const int64_t excess = static_cast<int64_t>(ranks_.size()) - max_rows_;
  drops_all_ = excess > 0 && max_rows_ == 0;
  drops_ = excess > 0 && !drops_all_;
  if (drops_) {
    // The excess-th lowest (score, key) is the first row kept: keys are unique, so exactly
    // `excess` rows rank below it.
    std::nth_element(ranks_.begin(), ranks_.begin() + excess, ranks_.end());
    first_kept_ = ranks_[excess];
  }
  std::vector<std::pair<uint32_t, int64_t>>().swap(ranks_);
}

EvictionPolicies::EvictionPolicies(const EvictionRules& rules) {
  if (rules.after_steps >= 0) owned_.push_back(std::make_unique<IdleRows>(rules.after_steps));
  if (rules.min_freq >= 0) owned_.push_back(std::make_unique<RareRows>(rules.min_freq));
  if (rules.l2_below >= 0.f) owned_.push_back(std::make_unique<SmallRows>(rules.l2_below));
  if (rules.max_rows >= 0 && rules.lru) owned_.push_back(std::make_unique<LruCap>(rules.max_rows));
  if (rules.max_rows >= 0 && !rules.lru) owned_.push_back(std::make_unique<LfuCap>(rules.max_rows));
  for (const auto& p : owned_) view_.push_back(p.get());
}

}  // namespace core
}  // namespace tfps
