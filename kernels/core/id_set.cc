#include "kernels/core/id_set.h"

#include <algorithm>

#include <tbb/spin_mutex.h>

namespace tfps {
namespace core {

// Aligned so that two threads' sets never share a cache line (push_back writes the vectors' ends).
struct alignas(128) IdSet::Buffers {
  std::vector<Slot> slots, spare;
  std::vector<int64_t> uniq;
  std::vector<int32_t> counts;
};

namespace {

class BufferPool {
 public:
  template <typename B>
  std::unique_ptr<B> Acquire() {
    tbb::spin_mutex::scoped_lock lock(mu_);
    if (free_.empty()) return std::make_unique<B>();
    std::unique_ptr<B> b(static_cast<B*>(free_.back().release()));
    free_.pop_back();
    return b;
  }
  template <typename B>
  void Release(std::unique_ptr<B> b) {
    tbb::spin_mutex::scoped_lock lock(mu_);
    if (free_.size() < kMaxPooled) free_.emplace_back(b.release(), [](void* p) { delete static_cast<B*>(p); });
  }

 private:
  static constexpr size_t kMaxPooled = 8;
  tbb::spin_mutex mu_;
  std::vector<std::unique_ptr<void, void (*)(void*)>> free_;
};

BufferPool& Pool() {
  static BufferPool* pool = new BufferPool();  // never destroyed: used until exit
  return *pool;
}

}  // namespace

IdSet::IdSet(int64_t expected)
    : buf_(Pool().Acquire<Buffers>()), slots_(buf_->slots), uniq_(&buf_->uniq), counts_(&buf_->counts) {
  int64_t cap = 64;
  while (static_cast<double>(cap) * kIdSetMaxLoad < static_cast<double>(expected)) cap <<= 1;
  Reset(cap);
  uniq_->clear();
  counts_->clear();
  uniq_->reserve(expected);
  counts_->reserve(expected);
}

IdSet::~IdSet() {
  if (buf_) Pool().Release(std::move(buf_));
}

IdSet::IdSet(IdSet&& other) noexcept
    : buf_(std::move(other.buf_)),
      slots_(buf_->slots),
      uniq_(other.uniq_),
      counts_(other.counts_),
      shift_(other.shift_),
      max_size_(other.max_size_) {}

void IdSet::Reset(int64_t capacity) {
  slots_.assign(capacity, Slot{0, -1});
  int log2 = 0;
  while ((int64_t{1} << log2) < capacity) ++log2;
  shift_ = 64 - log2;
  max_size_ = static_cast<int64_t>(static_cast<double>(capacity) * kIdSetMaxLoad);
}

void IdSet::InsertNew(int64_t id, uint32_t tag_dist, uint64_t pos, int32_t count) {
  const int32_t index = static_cast<int32_t>(uniq_->size());
  uniq_->push_back(id);
  counts_->push_back(count);
  if (static_cast<int64_t>(uniq_->size()) > max_size_ || (tag_dist & kMaxDist) >= kMaxDist ||
      !Place(Slot{tag_dist, index}, pos)) {
    Grow();  // re-places every id, the new one included
  }
}

bool IdSet::Place(Slot slot, uint64_t pos) {
  const uint64_t mask = slots_.size() - 1;
  for (;; pos = (pos + 1) & mask) {
    Slot& e = slots_[pos];
    if (e.index < 0) {
      e = slot;
      return true;
    }
    if ((e.tag_dist & kMaxDist) < (slot.tag_dist & kMaxDist)) std::swap(e, slot);
    if ((slot.tag_dist & kMaxDist) == kMaxDist) return false;
    ++slot.tag_dist;  // one step further from home
  }
}

void IdSet::Grow() {
  Reset(static_cast<int64_t>(slots_.size()) * 2);
  for (int32_t i = 0; i < static_cast<int32_t>(uniq_->size()); ++i) {
    const uint64_t h = HashKey((*uniq_)[i]);
    if (!Place(Slot{static_cast<uint32_t>(h) & kTagMask, i}, h >> shift_)) {
      Grow();  // pathological clustering: double again
      return;
    }
  }
}

int64_t EstimateDistinct(const int64_t* ids, int64_t n) {
  constexpr int64_t kSample = 1024;
  if (n <= kSample) return n;
  IdSet sample(kSample);
  const int64_t stride = n / kSample;
  for (int64_t i = 0; i < kSample; ++i) sample.Insert(ids[i * stride]);
  const int64_t d = static_cast<int64_t>(sample.uniq().size());
  return std::max<int64_t>(d, static_cast<int64_t>(static_cast<double>(n) * d / kSample));
}

}  // namespace core
}  // namespace tfps
