// RowArena: one index shard's rows, `stride` floats each, addressed by a 32-bit id (row id is
// at base + id * stride). The rows live in one anonymous mapping that grows by 1.25x (mremap:
// in place, or moved by the kernel's page tables, never copied), so ids stay valid while
// pointers do not: a row pointer is used only under the shard's lock, which growth also takes.
// Freed ids are recycled through an intrusive list (the next free id in the row's first 4
// bytes); one bit per id says which rows are live, for scans in id order (export, rehash,
// re-layout, eviction), which read memory sequentially. Only the pages rows have touched take
// memory (bytes_reserved counts those and the live bits): no block slack, no allocator headers.
// Not thread-safe: the owning shard's lock guards it. Allocate throws std::bad_alloc when
// memory or the id space (kMaxRowsPerShard) runs out, and then changes nothing.
#ifndef TFPS_KERNELS_CORE_ROW_ARENA_H_
#define TFPS_KERNELS_CORE_ROW_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/core/config.h"

namespace tfps {
namespace core {

class RowArena {
 public:
  // stride: floats per row, at least 1.
  explicit RowArena(int64_t stride);
  ~RowArena();
  RowArena(const RowArena&) = delete;
  RowArena& operator=(const RowArena&) = delete;

  float* Row(uint32_t id) const { return base_ + static_cast<int64_t>(id) * stride_; }
  // k ids into ids[0..k): room for all of them first (may throw; nothing changed), then
  // recycled ids, then new ones in increasing order.
  void Allocate(int64_t k, uint32_t* ids);
  // Returns a live id to the arena (its row's first 4 bytes then hold the free list).
  void Free(uint32_t id);
  bool Live(uint32_t id) const { return (live_[id >> 6] >> (id & 63)) & 1u; }
  // Ids below end() were handed out at some time (live or free).
  uint32_t end() const { return used_; }
  int64_t stride() const { return stride_; }
  int64_t rows_in_use() const { return in_use_; }
  int64_t bytes_reserved() const;

 private:
  static constexpr uint32_t kNoFree = UINT32_MAX;
  void Reserve(int64_t rows);  // mapping for `rows` ids (may throw)
  void Populate(uint32_t from, uint32_t to);  // pre-faults the whole pages rows [from, to) start on

  const int64_t stride_;
  float* base_ = nullptr;
  size_t mapped_ = 0;        // bytes mapped
  uint32_t used_ = 0;        // ids handed out so far (high-water mark)
  int64_t in_use_ = 0;
  uint32_t free_head_ = kNoFree;
  int64_t free_count_ = 0;
  std::vector<uint64_t> live_;  // a bit per id below used_
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_ROW_ARENA_H_
