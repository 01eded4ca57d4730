#include "kernels/core/unique.h"

#include <algorithm>
#include <utility>

#include "kernels/core/config.h"
#include "kernels/core/hash.h"
#include "kernels/core/id_set.h"
#include "kernels/core/parallel.h"

namespace tfps {
namespace core {
namespace {

// Dedups ids[begin, end) into set, writing set-local positions to inverse.
template <typename Index>
void Dedup(const int64_t* ids, int64_t begin, int64_t end, IdSet* set, Index* inverse) {
  constexpr int64_t kBlock = 16;  // hash a block ahead and prefetch, so misses overlap
  uint64_t h[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t m = std::min(kBlock, end - b);
    for (int64_t j = 0; j < m; ++j) {
      h[j] = HashKey(ids[b + j]);
      set->Prefetch(h[j]);
    }
    for (int64_t j = 0; j < m; ++j) inverse[b + j] = set->Insert(ids[b + j], h[j]);
  }
}

}  // namespace

int64_t PartitionOf(int64_t id, int64_t num_partitions, PartitionStrategy strategy) {
  if (strategy == PartitionStrategy::kMod) {
    const int64_t r = id % num_partitions;
    return r < 0 ? r + num_partitions : r;
  }
  const uint64_t h = Mix64(static_cast<uint64_t>(id) ^ kPartitionSalt) >> 32;
  return static_cast<int64_t>((h * static_cast<uint64_t>(num_partitions)) >> 32);
}

template <typename Index>
void UniqueByHash(const int64_t* ids, int64_t n, Index* inverse, std::vector<int64_t>* uniq,
                  std::vector<int32_t>* counts, int64_t size_divisor) {
  IdSet set(EstimateDistinct(ids, n) / size_divisor);
  Dedup(ids, 0, n, &set, inverse);
  uniq->assign(set.uniq().begin(), set.uniq().end());
  counts->assign(set.counts().begin(), set.counts().end());
}

template <typename Index>
void UniqueByParallelHash(const int64_t* ids, int64_t n, Index* inverse, std::vector<int64_t>* uniq,
                          std::vector<int32_t>* counts, int64_t size_divisor) {
  const int parts = ParallelParts();
  const int64_t piece = (n + parts - 1) / parts;
  std::vector<IdSet> sets;
  for (int p = 0; p < parts; ++p) {
    const int64_t begin = std::min(n, p * piece), end = std::min(n, (p + 1) * piece);
    sets.emplace_back(EstimateDistinct(ids + begin, end - begin) / size_divisor);
  }
  ParallelPieces(n, parts, [&](int p, int64_t begin, int64_t end) { Dedup(ids, begin, end, &sets[p], inverse); });
  // Piece 0's unique ids come first; each later piece appends the ids no earlier piece
  // had, in its own first-occurrence order. remaps[p][local] = global position.
  uniq->assign(sets[0].uniq().begin(), sets[0].uniq().end());
  counts->assign(sets[0].counts().begin(), sets[0].counts().end());
  std::vector<std::vector<int32_t>> remaps(parts);
  for (int p = 1; p < parts; ++p) {
    const std::vector<int64_t>& local = sets[p].uniq();
    std::vector<int32_t>& remap = remaps[p];
    remap.resize(local.size());
    // Look the piece's ids up in the earlier pieces in parallel (read-only), then number
    // the ids none of them had, in order.
    const int64_t m = static_cast<int64_t>(local.size());
    ParallelRange(
        m,
        [&](int64_t lo, int64_t hi) {
          constexpr int64_t kAhead = 8;
          for (int64_t j = lo; j < hi; ++j) {
            if (j + kAhead < hi) sets[0].Prefetch(HashKey(local[j + kAhead]));
            const uint64_t h = HashKey(local[j]);
            int32_t g = -1;
            for (int q = 0; q < p && g < 0; ++q) {
              const int32_t k = sets[q].Find(local[j], h);
              if (k >= 0) g = q == 0 ? k : remaps[q][k];
            }
            remap[j] = g;
          }
        },
        kParallelRemapMinN / 4);
    for (int64_t j = 0; j < m; ++j) {
      if (remap[j] < 0) {
        remap[j] = static_cast<int32_t>(uniq->size());
        uniq->push_back(local[j]);
        counts->push_back(0);
      }
      (*counts)[remap[j]] += sets[p].counts()[j];
    }
    const int64_t begin = std::min(n, p * piece), len = std::min(n, (p + 1) * piece) - begin;
    ParallelRange(len, [&](int64_t lo, int64_t hi) {
      for (int64_t i = begin + lo; i < begin + hi; ++i) inverse[i] = remap[inverse[i]];
    });
  }
}

template <typename Index>
void UniqueWithCounts(const int64_t* ids, int64_t n, Index* inverse, std::vector<int64_t>* uniq,
                      std::vector<int32_t>* counts) {
  // A sampled estimate of distinct ids picks the table size and whether to split.
  const bool skewed = EstimateDistinct(ids, n) < n / 2;
  const int64_t divisor = skewed ? kSkewedSizeDivisor : 1;
  if (n >= (skewed ? kParallelUniqueMinNSkewed : kParallelUniqueMinNDistinct)) {
    UniqueByParallelHash(ids, n, inverse, uniq, counts, divisor);
  } else {
    UniqueByHash(ids, n, inverse, uniq, counts, divisor);
  }
}

template <typename Index>
void UniquePartition(const int64_t* ids, int64_t n, int64_t num_partitions, PartitionStrategy strategy,
                     Index* inverse, std::vector<int64_t>* uniq, std::vector<int32_t>* counts,
                     std::vector<int64_t>* offsets) {
  std::vector<int64_t> first_uniq;
  std::vector<int32_t> first_counts;
  UniqueWithCounts(ids, n, inverse, &first_uniq, &first_counts);
  const int64_t u = static_cast<int64_t>(first_uniq.size());
  offsets->assign(num_partitions + 1, 0);
  if (num_partitions == 1) {
    (*offsets)[1] = u;
    uniq->swap(first_uniq);
    counts->swap(first_counts);
    return;
  }
  // Stable counting sort of the unique ids by partition, then inverse through the permutation.
  std::vector<int64_t> part(u);
  const bool pow2 = strategy == PartitionStrategy::kMod && (num_partitions & (num_partitions - 1)) == 0;
  for (int64_t j = 0; j < u; ++j) {
    // floormod by a power of two is a mask in two's complement (no division).
    part[j] = pow2 ? (first_uniq[j] & (num_partitions - 1)) : PartitionOf(first_uniq[j], num_partitions, strategy);
    ++(*offsets)[part[j] + 1];
  }
  for (int64_t p = 0; p < num_partitions; ++p) (*offsets)[p + 1] += (*offsets)[p];
  std::vector<int64_t> fill(offsets->begin(), offsets->end() - 1);
  std::vector<int32_t> perm(u);
  uniq->resize(u);
  counts->resize(u);
  for (int64_t j = 0; j < u; ++j) {
    const int64_t at = fill[part[j]]++;
    perm[j] = static_cast<int32_t>(at);
    (*uniq)[at] = first_uniq[j];
    (*counts)[at] = first_counts[j];
  }
  ParallelRange(
      n, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) inverse[i] = perm[inverse[i]];
      },
      kParallelRemapMinN);
}

#define TFPS_INSTANTIATE(Index)                                                                        \
  template void UniqueByHash<Index>(const int64_t*, int64_t, Index*, std::vector<int64_t>*,            \
                                    std::vector<int32_t>*, int64_t);                                     \
  template void UniqueByParallelHash<Index>(const int64_t*, int64_t, Index*, std::vector<int64_t>*,    \
                                            std::vector<int32_t>*, int64_t);                             \
  template void UniqueWithCounts<Index>(const int64_t*, int64_t, Index*, std::vector<int64_t>*,        \
                                        std::vector<int32_t>*);                                          \
  template void UniquePartition<Index>(const int64_t*, int64_t, int64_t, PartitionStrategy, Index*,    \
                                       std::vector<int64_t>*, std::vector<int32_t>*, std::vector<int64_t>*);
TFPS_INSTANTIATE(int32_t)
TFPS_INSTANTIATE(int64_t)
#undef TFPS_INSTANTIATE

}  // namespace core
}  // namespace tfps
