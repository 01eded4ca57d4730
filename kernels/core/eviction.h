// Eviction: which rows a policy removes. The rules look at one row at a time (its value and
// its meta: freq, last_step); the size cap ranks every row left and drops the lowest. The
// table scans its rows in memory order under the shard locks and erases what this selects.
// Not thread-safe (one eviction's state); holds no table memory.
#ifndef TFPS_KERNELS_CORE_EVICTION_H_
#define TFPS_KERNELS_CORE_EVICTION_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace tfps {
namespace core {

// Which rows Evict() removes; a field < 0 is off. A row goes if any rule says so.
struct EvictPolicy {
  int64_t after_steps = -1;   // step - last_step > after_steps (not updated for that long)
  int64_t min_freq = -1;      // freq < min_freq (fewer training updates)
  float l2_below = -1.f;      // ||value||_2 < l2_below
  int64_t max_rows = -1;      // then keep at most this many rows, dropping the least
  bool lru = false;           //   frequently (LFU, default) or least recently (LRU) updated
};

class Eviction {
 public:
  // The policy at global step `step`, for rows of `dim` values.
  Eviction(const EvictPolicy& policy, int64_t step, int64_t dim) : policy_(policy), step_(step), dim_(dim) {}

  bool has_rules() const { return policy_.after_steps >= 0 || policy_.min_freq >= 0 || policy_.l2_below >= 0.f; }
  bool has_cap() const { return policy_.max_rows >= 0; }

  // Whether a rule selects the row: value [dim], meta = {freq, last_step}.
  bool Selects(const float* value, const uint32_t* meta) const {
    if (policy_.after_steps >= 0 && step_ - static_cast<int64_t>(meta[1]) > policy_.after_steps) return true;
    if (policy_.min_freq >= 0 && static_cast<int64_t>(meta[0]) < policy_.min_freq) return true;
    if (policy_.l2_below >= 0.f) {
      double sq = 0;
      for (int64_t j = 0; j < dim_; ++j) sq += static_cast<double>(value[j]) * value[j];
      if (sq < static_cast<double>(policy_.l2_below) * policy_.l2_below) return true;
    }
    return false;
  }

  // The cap: Rank() every row left, then OverCap() gives the keys of the rows beyond max_rows
  // with the lowest (freq or last_step, key), in no particular order, and forgets the ranks.
  void Rank(const uint32_t* meta, int64_t key) { score_.push_back({meta[policy_.lru ? 1 : 0], key}); }
  std::vector<int64_t> OverCap();

 private:
  const EvictPolicy policy_;
  const int64_t step_;
  const int64_t dim_;
  std::vector<std::pair<uint32_t, int64_t>> score_;  // (freq or last_step, key)
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_EVICTION_H_
