// TaggedIndex: one index shard's map from a key's 64-bit hash to a 32-bit row id.
//
// Open addressing with linear probing and backward-shift deletion (no tombstones). A slot is 4
// bytes: 0 when empty, else a kTagBits tag of the hash above kIdBits of (row id + 1), so the
// index costs 5-7.5 bytes per key and a probe reads a row only on a tag match. The key itself
// lives in its row: lookups take key_of(id), which reads it. A key's home slot is the low 32
// bits of its hash scaled to the capacity (multiply-shift, any capacity); the tag is bits
// 32..38, and the caller picks the shard from the high bits, so the three do not correlate.
// The index grows by kIndexGrowth once an insert would pass kMaxLoadFactor (config.h),
// rebuilt from the caller's rows in their memory order.
//
// Not thread-safe: the owning shard's lock guards it. Reserve() may throw std::bad_alloc and
// then leaves the index as it was; nothing else allocates.
#ifndef TFPS_KERNELS_CORE_TAGGED_INDEX_H_
#define TFPS_KERNELS_CORE_TAGGED_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/core/config.h"

namespace tfps {
namespace core {

class TaggedIndex {
 public:
  using Slot = uint32_t;

  // kShardInitialCapacity empty slots (may throw).
  TaggedIndex() : slots_(kShardInitialCapacity, 0) {}

  static int64_t Home(uint64_t h, size_t capacity) {
    return static_cast<int64_t>((static_cast<uint64_t>(static_cast<uint32_t>(h)) * capacity) >> 32);
  }
  static Slot Tag(uint64_t h) { return static_cast<Slot>((h >> 32) & ((1u << kTagBits) - 1)); }
  static Slot MakeSlot(uint64_t h, uint32_t id) { return (Tag(h) << kIdBits) | (id + 1); }
  static uint32_t IdOf(Slot e) { return (e & ((Slot{1} << kIdBits) - 1)) - 1; }
  static bool TagMatches(Slot e, uint64_t h) { return (e >> kIdBits) == Tag(h); }

  int64_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }
  int64_t bytes() const { return static_cast<int64_t>(slots_.size() * sizeof(Slot)); }
  // The row id in a nonempty slot.
  uint32_t IdAt(int64_t pos) const { return IdOf(slots_[pos]); }
  bool EmptyAt(int64_t pos) const { return slots_[pos] == 0; }

  // The slot holding the key, or -1. key_of(id) -> int64_t reads row id's key; it is called
  // only on a tag match.
  template <typename KeyOf>
  int64_t Find(uint64_t h, int64_t key, const KeyOf& key_of) const {
    const int64_t capacity = static_cast<int64_t>(slots_.size());
    for (int64_t pos = Home(h, slots_.size());; pos = Next(pos, capacity)) {
      const Slot e = slots_[pos];
      if (e == 0) return -1;
      if (TagMatches(e, h) && key_of(IdOf(e)) == key) return pos;
    }
  }
  // The slot holding the key, or else the empty slot where it would go (FillAt).
  template <typename KeyOf>
  int64_t FindOrEmpty(uint64_t h, int64_t key, const KeyOf& key_of) const {
    const int64_t capacity = static_cast<int64_t>(slots_.size());
    for (int64_t pos = Home(h, slots_.size());; pos = Next(pos, capacity)) {
      const Slot e = slots_[pos];
      if (e == 0 || (TagMatches(e, h) && key_of(IdOf(e)) == key)) return pos;
    }
  }
  // The first slot from the home whose tag matches (the key's, unless a rare tag collision),
  // or -1 at an empty slot: what a prefetch follows without reading a row.
  int64_t Candidate(uint64_t h) const {
    const int64_t capacity = static_cast<int64_t>(slots_.size());
    for (int64_t pos = Home(h, slots_.size());; pos = Next(pos, capacity)) {
      const Slot e = slots_[pos];
      if (e == 0) return -1;
      if (TagMatches(e, h)) return pos;
    }
  }
  void PrefetchHome(uint64_t h) const { __builtin_prefetch(&slots_[Home(h, slots_.size())]); }

  // Puts id in the empty slot pos that FindOrEmpty returned for h.
  void FillAt(int64_t pos, uint64_t h, uint32_t id) {
    slots_[pos] = MakeSlot(h, id);
    ++size_;
  }
  // Adds id under h, the key known to be absent and room made by Reserve (never throws).
  void Insert(uint64_t h, uint32_t id) {
    Place(h, id);
    ++size_;
  }
  // Grows so that `more` inserts fit under kMaxLoadFactor (may throw: the index is then
  // unchanged). A grown index is rebuilt by for_each_entry(place), which calls place(h, id)
  // for every entry (the caller's live rows, read in memory order; ids do not change).
  template <typename ForEachEntry>
  void Reserve(int64_t more, const ForEachEntry& for_each_entry) {
    const size_t capacity = CapacityFor(more);
    if (capacity == slots_.size()) return;
    std::vector<Slot> grown(capacity, 0);  // may throw: the index is unchanged
    slots_.swap(grown);
    for_each_entry([this](uint64_t h, uint32_t id) { Place(h, id); });
  }
  // Takes slot pos out (backward shift: every probe chain stays unbroken) and returns its id.
  // hash_of(id) -> uint64_t gives the hash of the entries it moves.
  template <typename HashOf>
  uint32_t EraseAt(int64_t pos, const HashOf& hash_of) {
    const int64_t capacity = static_cast<int64_t>(slots_.size());
    const uint32_t freed = IdOf(slots_[pos]);
    int64_t hole = pos;
    for (int64_t next = Next(hole, capacity); slots_[next] != 0; next = Next(next, capacity)) {
      const int64_t home = Home(hash_of(IdOf(slots_[next])), slots_.size());
      // Move the entry into the hole when its home is not in (hole, next].
      const bool stays = (hole < next) ? (home > hole && home <= next) : (home > hole || home <= next);
      if (!stays) {
        slots_[hole] = slots_[next];
        hole = next;
      }
    }
    slots_[hole] = 0;
    --size_;
    return freed;
  }
  void Swap(TaggedIndex& other) {
    slots_.swap(other.slots_);
    std::swap(size_, other.size_);
  }

 private:
  static int64_t Next(int64_t pos, int64_t capacity) { return pos + 1 == capacity ? 0 : pos + 1; }
  // The capacity that holds size() + more under kMaxLoadFactor: the current one or grown.
  size_t CapacityFor(int64_t more) const;
  void Place(uint64_t h, uint32_t id) {
    const int64_t capacity = static_cast<int64_t>(slots_.size());
    int64_t pos = Home(h, slots_.size());
    while (slots_[pos] != 0) pos = Next(pos, capacity);
    slots_[pos] = MakeSlot(h, id);
  }

  std::vector<Slot> slots_;
  int64_t size_ = 0;
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_TAGGED_INDEX_H_
