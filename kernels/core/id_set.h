// IdSet: a Robin Hood open-addressing map id -> position in first-occurrence
// order, with a count per id; the building block of Unique and UniquePartition.
//
// Slots are 8 bytes: a 24-bit hash tag, an 8-bit probe distance and the int32
// position in uniq(); the id itself is confirmed in uniq() (hot ids are cached
// there anyway). Robin Hood displacement keeps probe sequences short at load up
// to kIdSetMaxLoad, so the table is sized from the expected number of distinct
// ids (no 2N reserve) and grows by doubling if the estimate was low. Lookups of
// absent ids stop as soon as they pass a richer slot.
//
// Not thread-safe: one IdSet per thread. Buffers come from a process-wide pool
// and go back to it on destruction: tables of a few MB allocated fresh on every
// call are mmap'd and page-fault on first touch (the cost that makes tf.unique slow).
#ifndef TFPS_KERNELS_CORE_ID_SET_H_
#define TFPS_KERNELS_CORE_ID_SET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/hash.h"

namespace tfps {
namespace core {

constexpr double kIdSetMaxLoad = 0.7;

class IdSet {
 public:
  // Sized for `expected` distinct ids.
  explicit IdSet(int64_t expected);
  ~IdSet();
  IdSet(IdSet&&) noexcept;
  IdSet(const IdSet&) = delete;
  IdSet& operator=(const IdSet&) = delete;

  // Hints the cache about the home slot of hash h (call a few ids ahead).
  void Prefetch(uint64_t h) const { __builtin_prefetch(&slots_[h >> shift_]); }

  // Position of id (whose HashKey is h) in uniq(), appending it when new; adds `count`.
  int32_t Insert(int64_t id, uint64_t h, int32_t count = 1) {
    const uint64_t mask = slots_.size() - 1;
    const uint32_t tag = static_cast<uint32_t>(h) & kTagMask;
    const int64_t* uniq = uniq_->data();
    uint32_t dist = 0;
    uint64_t pos = h >> shift_;
    for (;; pos = (pos + 1) & mask, ++dist) {
      const Slot& e = slots_[pos];
      if (e.index < 0 || (e.tag_dist & kMaxDist) < dist) break;  // absent: insert here
      if ((e.tag_dist & kTagMask) == tag && uniq[e.index] == id) {
        (*counts_)[e.index] += count;
        return e.index;
      }
    }
    InsertNew(id, tag | dist, pos, count);
    return static_cast<int32_t>(uniq_->size()) - 1;
  }
  int32_t Insert(int64_t id) { return Insert(id, HashKey(id)); }

  // Position of id in uniq(), or -1.
  int32_t Find(int64_t id, uint64_t h) const {
    const uint64_t mask = slots_.size() - 1;
    const uint32_t tag = static_cast<uint32_t>(h) & kTagMask;
    uint32_t dist = 0;
    for (uint64_t pos = h >> shift_;; pos = (pos + 1) & mask, ++dist) {
      const Slot& e = slots_[pos];
      if (e.index < 0 || (e.tag_dist & kMaxDist) < dist) return -1;
      if ((e.tag_dist & kTagMask) == tag && (*uniq_)[e.index] == id) return e.index;
    }
  }

  const std::vector<int64_t>& uniq() const { return *uniq_; }
  const std::vector<int32_t>& counts() const { return *counts_; }
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }

 private:
  struct Slot {
    uint32_t tag_dist;  // hash bits 8..31 | probe distance (0..255)
    int32_t index;      // -1: empty
  };
  struct Buffers;
  static constexpr uint32_t kTagMask = 0xFFFFFF00u;
  static constexpr uint32_t kMaxDist = 0xFF;
  // Appends a new id whose probe for insertion stopped at pos with tag_dist.
  void InsertNew(int64_t id, uint32_t tag_dist, uint64_t pos, int32_t count);
  void Reset(int64_t capacity);
  void Grow();
  // Places a new slot (known absent) starting at its home, displacing richer ones.
  // Returns false when a probe distance would overflow 8 bits.
  bool Place(Slot slot, uint64_t pos);

  std::unique_ptr<Buffers> buf_;
  std::vector<Slot>& slots_;
  std::vector<int64_t>* uniq_;
  std::vector<int32_t>* counts_;
  int shift_ = 58;
  int64_t max_size_ = 0;
};

// Expected number of distinct ids among ids[0..n): distinct ids in an evenly spaced
// sample of up to 1024, scaled to n (exact for n <= 1024). An upper-side estimate for
// skewed data; cheap (one small table, no allocation past the pool).
int64_t EstimateDistinct(const int64_t* ids, int64_t n);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_ID_SET_H_
