// Eviction: which rows a table drops, one rule per class behind one interface
// (EvictionPolicy), as DeepRec's eviction policies.
//
// Two kinds of rule. A row rule looks at one row at a time (its value, update count and last
// update step): IdleRows, RareRows, SmallRows. A ranking rule needs every row first: the size
// caps LfuCap and LruCap rank the rows left and drop the lowest. EmbeddingTable::Evict runs
// the row rules shard by shard under each shard's lock (a row goes if any of them selects it),
// then each ranking rule in turn with every shard locked: Rank() over every row left,
// Ranked(), then Selects() over them again.
//
// Thread-safety: a policy holds no table memory; the row rules are immutable (one may serve
// concurrent evictions), a ranking rule holds one eviction's ranks (one eviction at a time).
#ifndef TFPS_KERNELS_CORE_EVICTION_H_
#define TFPS_KERNELS_CORE_EVICTION_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace tfps {
namespace core {

// A row as the policies see it, valid for the call it is passed to.
struct RowView {
  int64_t key = 0;
  const float* value = nullptr;  // [dim]
  int64_t dim = 0;
  uint32_t freq = 0;       // training updates so far
  uint32_t last_step = 0;  // global step of the last update
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // Whether the rule ranks every row before it selects (Rank, Ranked, then Selects).
  virtual bool ranks() const { return false; }
  virtual void Rank(const RowView&) {}
  virtual void Ranked() {}
  // Whether the row goes at global step `step`.
  virtual bool Selects(const RowView& row, int64_t step) const = 0;
};

// Rows not updated for more than after_steps steps: step - last_step > after_steps.
class IdleRows final : public EvictionPolicy {
 public:
  explicit IdleRows(int64_t after_steps);  // >= 0, else std::invalid_argument
  bool Selects(const RowView& row, int64_t step) const override {
    return step - static_cast<int64_t>(row.last_step) > after_steps_;
  }

 private:
  const int64_t after_steps_;
};

// Rows with fewer than min_freq training updates.
class RareRows final : public EvictionPolicy {
 public:
  explicit RareRows(int64_t min_freq);  // >= 0, else std::invalid_argument
  bool Selects(const RowView& row, int64_t) const override { return static_cast<int64_t>(row.freq) < min_freq_; }

 private:
  const int64_t min_freq_;
};

// Rows whose value has an L2 norm below l2_below (summed in double).
class SmallRows final : public EvictionPolicy {
 public:
  explicit SmallRows(float l2_below);  // >= 0, else std::invalid_argument
  bool Selects(const RowView& row, int64_t) const override;

 private:
  const double l2_below_;
};

// The size cap: keeps at most max_rows rows, dropping those of the lowest (Score, key); the
// subclasses say what the score is. Selects() is valid after Ranked(), for the rows ranked.
class RowCap : public EvictionPolicy {
 public:
  explicit RowCap(int64_t max_rows);  // >= 0, else std::invalid_argument
  bool ranks() const final { return true; }
  void Rank(const RowView& row) final { ranks_.emplace_back(Score(row), row.key); }
  // Finds the (score, key) below which the rows go, and forgets the ranks.
  void Ranked() final;
  bool Selects(const RowView& row, int64_t) const final {
    return drops_all_ || (drops_ && std::make_pair(Score(row), row.key) < first_kept_);
  }

 protected:
  virtual uint32_t Score(const RowView& row) const = 0;

 private:
  const int64_t max_rows_;
  std::vector<std::pair<uint32_t, int64_t>> ranks_;  // (score, key) of every row ranked
  bool drops_ = false;      // some rows go: those below first_kept_
  bool drops_all_ = false;  // every row goes (max_rows 0)
  std::pair<uint32_t, int64_t> first_kept_{0, 0};
};

// The cap by update count: the least frequently updated rows go (LFU).
class LfuCap final : public RowCap {
 public:
  using RowCap::RowCap;

 protected:
  uint32_t Score(const RowView& row) const override { return row.freq; }
};

// The cap by last update: the least recently updated rows go (LRU).
class LruCap final : public RowCap {
 public:
  using RowCap::RowCap;

 protected:
  uint32_t Score(const RowView& row) const override { return row.last_step; }
};

// A table's eviction rules as its options give them (EmbeddingOptions: evict_after_steps,
// evict_min_freq, evict_l2_below, max_rows, cap_policy), each < 0 off.
struct EvictionRules {
  int64_t after_steps = -1, min_freq = -1, max_rows = -1;
  float l2_below = -1.f;
  bool lru = false;  // the cap drops the least recently updated rows (else the least frequently)
};

// The policies of a table's rules, made once here for every caller (the evict op, the Python
// binding): IdleRows, RareRows, SmallRows, then the cap (LruCap or LfuCap), those that are on.
class EvictionPolicies {
 public:
  explicit EvictionPolicies(const EvictionRules& rules);
  const std::vector<EvictionPolicy*>& get() const { return view_; }

 private:
  std::vector<std::unique_ptr<EvictionPolicy>> owned_;
  std::vector<EvictionPolicy*> view_;
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_EVICTION_H_
