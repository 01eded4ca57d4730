#include "kernels/core/unique.h"

#include <algorithm>
#include <memory>

#include <tbb/spin_mutex.h>

#include "kernels/core/config.h"
#include "kernels/core/hash.h"
#include "kernels/core/parallel.h"

namespace tfps {
namespace core {
namespace {

// 8 bytes a slot: the upper half of the id's hash and its position in uniq; the id
// itself is confirmed in uniq (hot ids are cached there anyway).
struct Entry {
  uint32_t tag;
  int32_t index;  // -1: empty
};

// Buffers of one IdSet. Batches of a million ids need megabytes of table; fresh
// allocations of that size are mmap'd and page-fault on first touch every call
// (the cost that makes tf.unique slow), so buffers are recycled through a pool.
struct Scratch {
  std::vector<Entry> slots, spare;
  std::vector<int64_t> uniq;
  std::vector<int32_t> counts;
};

class ScratchPool {
 public:
  std::unique_ptr<Scratch> Acquire() {
    tbb::spin_mutex::scoped_lock lock(mu_);
    if (free_.empty()) return std::make_unique<Scratch>();
    std::unique_ptr<Scratch> s = std::move(free_.back());
    free_.pop_back();
    return s;
  }
  void Release(std::unique_ptr<Scratch> s) {
    tbb::spin_mutex::scoped_lock lock(mu_);
    if (free_.size() < kMaxPooled) free_.push_back(std::move(s));
  }

 private:
  static constexpr size_t kMaxPooled = 8;
  tbb::spin_mutex mu_;
  std::vector<std::unique_ptr<Scratch>> free_;
};

ScratchPool& Pool() {
  static ScratchPool* pool = new ScratchPool();  // never destroyed: used until exit
  return *pool;
}

// Linear-probing map id -> (position in uniq, count), grown by doubling at load 1/2.
class IdSet {
 public:
  explicit IdSet(int64_t expected) : s_(Pool().Acquire()) {
    int64_t cap = 64;
    while (cap < 2 * expected) cap <<= 1;
    Reset(&s_->slots, cap);
    s_->uniq.clear();
    s_->counts.clear();
  }
  ~IdSet() {
    if (s_) Pool().Release(std::move(s_));
  }
  IdSet(IdSet&&) = default;

  // Hints the cache about the slot of a hash Insert will probe soon.
  void Prefetch(uint64_t h) const { __builtin_prefetch(&s_->slots[h & mask_]); }

  // Position of id (whose HashKey is h) among the unique ids, adding it when new; counts it once.
  int32_t Insert(int64_t id) { return Insert(id, HashKey(id)); }
  int32_t Insert(int64_t id, uint64_t h) {
    std::vector<Entry>& slots = s_->slots;
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t pos = h & mask_;; pos = (pos + 1) & mask_) {
      Entry& e = slots[pos];
      if (e.index < 0) {
        const int32_t index = static_cast<int32_t>(s_->uniq.size());
        e = Entry{tag, index};
        s_->uniq.push_back(id);
        s_->counts.push_back(1);
        if (static_cast<int64_t>(s_->uniq.size()) * 2 > static_cast<int64_t>(slots.size())) Grow();
        return index;
      }
      if (e.tag == tag && s_->uniq[e.index] == id) {
        ++s_->counts[e.index];
        return e.index;
      }
    }
  }

  // Position of id (whose HashKey is h) among the unique ids, or -1.
  int32_t Find(int64_t id, uint64_t h) const {
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (uint64_t pos = h & mask_;; pos = (pos + 1) & mask_) {
      const Entry& e = s_->slots[pos];
      if (e.index < 0 || (e.tag == tag && s_->uniq[e.index] == id)) return e.index;
    }
  }

  const std::vector<int64_t>& uniq() const { return s_->uniq; }
  const std::vector<int32_t>& counts() const { return s_->counts; }

 private:
  void Reset(std::vector<Entry>* slots, int64_t cap) {
    slots->assign(cap, Entry{0u, -1});
    mask_ = static_cast<uint64_t>(cap - 1);
  }
  void Grow() {
    s_->spare.swap(s_->slots);
    Reset(&s_->slots, static_cast<int64_t>(s_->spare.size()) * 2);
    for (const Entry& e : s_->spare) {
      if (e.index < 0) continue;
      uint64_t pos = HashKey(s_->uniq[e.index]) & mask_;
      while (s_->slots[pos].index >= 0) pos = (pos + 1) & mask_;
      s_->slots[pos] = e;
    }
  }
  std::unique_ptr<Scratch> s_;
  uint64_t mask_ = 0;
};

}  // namespace

void UniqueWithCounts(const int64_t* ids, int64_t n, int32_t* inverse, std::vector<int64_t>* uniq,
                      std::vector<int32_t>* counts) {
  if (n < kParallelThreshold) {
    IdSet set(std::min<int64_t>(n, 1024));
    for (int64_t i = 0; i < n; ++i) inverse[i] = set.Insert(ids[i]);
    uniq->assign(set.uniq().begin(), set.uniq().end());
    counts->assign(set.counts().begin(), set.counts().end());
    return;
  }
  const int64_t piece = (n + kUniqueParts - 1) / kUniqueParts;
  std::vector<IdSet> sets;
  for (int p = 0; p < kUniqueParts; ++p) sets.emplace_back(piece / 4);
  ParallelTasks(kUniqueParts, [&](int p) {
    const int64_t begin = p * piece, end = std::min(n, (p + 1) * piece);
    // Hash a block ahead and prefetch its slots, so cache misses of new ids overlap.
    constexpr int64_t kBlock = 16;
    uint64_t h[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t m = std::min(kBlock, end - b);
      for (int64_t j = 0; j < m; ++j) {
        h[j] = HashKey(ids[b + j]);
        sets[p].Prefetch(h[j]);
      }
      for (int64_t j = 0; j < m; ++j) inverse[b + j] = sets[p].Insert(ids[b + j], h[j]);
    }
  });
  // Piece 0's unique ids come first; each later piece appends the ids no earlier piece
  // had, in its own first-occurrence order. remaps[p][local] = global index.
  uniq->assign(sets[0].uniq().begin(), sets[0].uniq().end());
  counts->assign(sets[0].counts().begin(), sets[0].counts().end());
  std::vector<std::vector<int32_t>> remaps(kUniqueParts);
  for (int p = 1; p < kUniqueParts; ++p) {
    const std::vector<int64_t>& local = sets[p].uniq();
    std::vector<int32_t>& remap = remaps[p];
    remap.resize(local.size());
    std::vector<uint64_t> hashes(local.size());
    for (size_t j = 0; j < local.size(); ++j) hashes[j] = HashKey(local[j]);
    for (size_t j = 0; j < local.size(); ++j) {
      if (j + 8 < local.size()) sets[0].Prefetch(hashes[j + 8]);
      int32_t g = -1;
      for (int q = 0; q < p && g < 0; ++q) {
        const int32_t k = sets[q].Find(local[j], hashes[j]);
        if (k >= 0) g = q == 0 ? k : remaps[q][k];
      }
      if (g < 0) {
        g = static_cast<int32_t>(uniq->size());
        uniq->push_back(local[j]);
        counts->push_back(0);
      }
      (*counts)[g] += sets[p].counts()[j];
      remap[j] = g;
    }
    const int64_t begin = p * piece, len = std::min(n, (p + 1) * piece) - begin;
    ParallelRange(len, [&](int64_t lo, int64_t hi) {
      for (int64_t i = begin + lo; i < begin + hi; ++i) inverse[i] = remap[inverse[i]];
    });
  }
}

}  // namespace core
}  // namespace tfps
