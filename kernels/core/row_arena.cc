#include "kernels/core/row_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/core/memory_guard.h"

namespace tfps {
namespace core {
namespace {

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUpToPage(size_t bytes) { return (bytes + PageBytes() - 1) / PageBytes() * PageBytes(); }

}  // namespace

RowArena::RowArena(int64_t stride) : stride_(stride) {
  if (stride < 1) throw std::invalid_argument("RowArena: stride must be >= 1");
}

RowArena::~RowArena() {
  if (base_ != nullptr) munmap(base_, mapped_);
}

void RowArena::Reserve(int64_t rows) {
  const size_t need = static_cast<size_t>(rows) * static_cast<size_t>(stride_) * sizeof(float);
  if (need <= mapped_) return;
  const size_t bytes = RoundUpToPage(std::max(need, mapped_ + mapped_ / 4));
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not follow mremap: a range one arena gave up and another got reads
  // as a race. Under it the arena maps anew and copies (the same contents and ids).
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (base_ != nullptr) {
    std::memcpy(p, base_, mapped_);
    munmap(base_, mapped_);
  }
#else
  void* p = base_ == nullptr ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                             : mremap(base_, mapped_, bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) throw std::bad_alloc();
#endif
  base_ = static_cast<float*>(p);
  mapped_ = bytes;
}

void RowArena::Populate(uint32_t from, uint32_t to) {
#ifdef MADV_POPULATE_WRITE
  // The pages rows [from, to) start on, faulted in by one call instead of one fault per page
  // (a hint: on a kernel without it, or when it fails, the rows fault in as they are written).
  const size_t row = static_cast<size_t>(stride_) * sizeof(float);
  const size_t begin = (from * row + PageBytes() - 1) / PageBytes() * PageBytes();
  const size_t end = std::min(RoundUpToPage(to * row), mapped_);
  if (end > begin) madvise(reinterpret_cast<char*>(base_) + begin, end - begin, MADV_POPULATE_WRITE);
#else
  (void)from;
  (void)to;
#endif
}

void RowArena::Allocate(int64_t k, uint32_t* ids) {
  const int64_t recycled = std::min(k, free_count_);
  const int64_t fresh = k - recycled;
  if (static_cast<int64_t>(used_) + fresh > kMaxRowsPerShard) throw std::bad_alloc();
  // The rows written below take real memory: refused when the machine has not got it.
  if (!MemoryAvailableFor(fresh * stride_ * static_cast<int64_t>(sizeof(float)))) throw std::bad_alloc();
  // Room first (either may throw; the live bits may grow without harm), then nothing throws.
  live_.resize((static_cast<size_t>(used_) + static_cast<size_t>(fresh) + 63) / 64, 0);
  Reserve(static_cast<int64_t>(used_) + fresh);
  for (int64_t i = 0; i < recycled; ++i) {
    const uint32_t id = free_head_;
    std::memcpy(&free_head_, Row(id), sizeof(uint32_t));
    ids[i] = id;
  }
  if (fresh > 0) Populate(used_, used_ + static_cast<uint32_t>(fresh));
  for (int64_t i = recycled; i < k; ++i) ids[i] = used_++;
  free_count_ -= recycled;
  in_use_ += k;
  for (int64_t i = 0; i < k; ++i) live_[ids[i] >> 6] |= uint64_t{1} << (ids[i] & 63);
}

void RowArena::Free(uint32_t id) {
  live_[id >> 6] &= ~(uint64_t{1} << (id & 63));
  std::memcpy(Row(id), &free_head_, sizeof(uint32_t));
  free_head_ = id;
  ++free_count_;
  --in_use_;
}

int64_t RowArena::bytes_reserved() const {
  const size_t touched = RoundUpToPage(static_cast<size_t>(used_) * static_cast<size_t>(stride_) * sizeof(float));
  return static_cast<int64_t>(std::min(touched, mapped_) + live_.capacity() * sizeof(uint64_t));
}

}  // namespace core
}  // namespace tfps
