#include "kernels/core/unique.h"

#include <algorithm>

#include "kernels/core/config.h"
#include "kernels/core/hash.h"
#include "kernels/core/parallel.h"

namespace tfps {
namespace core {
namespace {

// Linear-probing set of (id -> position in uniq), grown by doubling at load 1/2.
class IdSet {
 public:
  explicit IdSet(int64_t expected) {
    int64_t cap = 64;
    while (cap < 2 * expected) cap <<= 1;
    Reset(cap);
  }

  // Position of id in *uniq, appending it when new.
  int32_t Insert(int64_t id, uint64_t h, std::vector<int64_t>* uniq, std::vector<int32_t>* counts) {
    for (uint64_t pos = h & mask_;; pos = (pos + 1) & mask_) {
      Entry& e = slots_[pos];
      if (e.index < 0) {
        const int32_t index = static_cast<int32_t>(uniq->size());
        e = Entry{id, index};
        uniq->push_back(id);
        counts->push_back(1);
        if (static_cast<int64_t>(uniq->size()) * 2 > static_cast<int64_t>(slots_.size())) Grow(*uniq);
        return index;
      }
      if (e.id == id) {
        ++(*counts)[e.index];
        return e.index;
      }
    }
  }

 private:
  struct Entry {
    int64_t id;
    int32_t index;  // -1: empty
  };
  void Reset(int64_t cap) {
    slots_.assign(cap, Entry{0, -1});
    mask_ = static_cast<uint64_t>(cap - 1);
  }
  void Grow(const std::vector<int64_t>& uniq) {
    Reset(static_cast<int64_t>(slots_.size()) * 2);
    for (int32_t i = 0; i < static_cast<int32_t>(uniq.size()); ++i) {
      uint64_t pos = HashKey(uniq[i]) & mask_;
      while (slots_[pos].index >= 0) pos = (pos + 1) & mask_;
      slots_[pos] = Entry{uniq[i], i};
    }
  }
  std::vector<Entry> slots_;
  uint64_t mask_ = 0;
};

}  // namespace

void UniqueWithCounts(const int64_t* ids, int64_t n, int32_t* inverse, std::vector<int64_t>* uniq,
                      std::vector<int32_t>* counts) {
  uniq->clear();
  counts->clear();
  if (n < kParallelThreshold) {
    IdSet set(std::min<int64_t>(n, 1024));
    for (int64_t i = 0; i < n; ++i) inverse[i] = set.Insert(ids[i], HashKey(ids[i]), uniq, counts);
    return;
  }
  std::vector<int64_t> part_uniq[kUniqueParts];
  std::vector<int32_t> part_counts[kUniqueParts];
  ParallelTasks(kUniqueParts, [&](int p) {
    IdSet set(n / (8 * kUniqueParts));
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t h = HashKey(ids[i]);
      if (static_cast<int>((h >> 32) * kUniqueParts >> 32) != p) continue;
      inverse[i] = set.Insert(ids[i], h, &part_uniq[p], &part_counts[p]);
    }
  });
  int32_t offset[kUniqueParts];
  int64_t total = 0;
  for (int p = 0; p < kUniqueParts; ++p) {
    offset[p] = static_cast<int32_t>(total);
    total += static_cast<int64_t>(part_uniq[p].size());
  }
  uniq->reserve(total);
  counts->reserve(total);
  for (int p = 0; p < kUniqueParts; ++p) {
    uniq->insert(uniq->end(), part_uniq[p].begin(), part_uniq[p].end());
    counts->insert(counts->end(), part_counts[p].begin(), part_counts[p].end());
  }
  ParallelRange(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t h = HashKey(ids[i]);
      inverse[i] += offset[(h >> 32) * kUniqueParts >> 32];
    }
  });
}

}  // namespace core
}  // namespace tfps
