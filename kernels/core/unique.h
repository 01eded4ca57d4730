// Deduplication of a batch of int64 ids, and the fused unique + partition.
// Thread-safe (no shared state but the IdSet buffer pool); the caller owns buffers.
//
// UniqueWithCounts: unique ids in order of first occurrence, inverse, counts.
// The path is chosen per call from n and a sampled estimate of distinct ids
// (EstimateDistinct; "skewed" when under n/2); thresholds in config.h, set by
// benchmarks/bench_unique_paths.cc (ns per id, 2-core x86):
//   one Robin Hood IdSet (UniqueByHash), sized for the estimate (/2 when skewed:
//     the sample overestimates skewed ids; hash/1 vs /2 at 1M Zipf: 14.4 vs 11.7 ns,
//     at 1M uniform: 30.0 vs 43.4 ns);
//   from kParallelUniqueMinNSkewed (skewed) or kParallelUniqueMinNDistinct ids:
//     ParallelParts() contiguous pieces deduplicated in parallel, merged in piece order
//     (keeps global first-occurrence order), inverse remapped in parallel
//     (1M Zipf: 6.6 vs 11.7 ns; 131k uniform: 18.9 vs 12.1 ns, merging
//     all-distinct pieces costs more than the split saves).
//   A sort of (id, position) pairs was measured too and never won (16 ids: 14 vs
//   8 ns; 1024: 37 vs 5 ns), so small inputs take the single-table path.
//
// UniquePartition: the same ids grouped by partition (partition p owns
// uniq[offsets[p] : offsets[p+1]]), first occurrence order within a partition.
//   mod:  p = floormod(id, P)
//   hash: p = ((Mix64(id ^ kPartitionSalt) >> 32) * P) >> 32  -- spreads ids that share
//         a stride (multiples of P, feature-tagged ids) evenly; the salt keeps it
//         independent of the table's own shard hash (Mix64(id)).
#ifndef TFPS_KERNELS_CORE_UNIQUE_H_
#define TFPS_KERNELS_CORE_UNIQUE_H_

#include <cstdint>
#include <vector>

namespace tfps {
namespace core {

constexpr uint64_t kPartitionSalt = 0xD6E8FEB86659FD93ULL;

enum class PartitionStrategy { kMod, kHash };

// The partition of one id.
int64_t PartitionOf(int64_t id, int64_t num_partitions, PartitionStrategy strategy);

// inverse: [n] output (Index = int32_t, or int64_t for batches of 2^31 ids and more);
// uniq and counts are resized to the number of unique ids (fewer than 2^31).
template <typename Index>
void UniqueWithCounts(const int64_t* ids, int64_t n, Index* inverse, std::vector<int64_t>* uniq,
                      std::vector<int32_t>* counts);

// The individual paths of UniqueWithCounts, for benchmarks/bench_unique_paths.cc.
// size_divisor: the hash table is sized for EstimateDistinct / size_divisor ids.
template <typename Index>
void UniqueByHash(const int64_t* ids, int64_t n, Index* inverse, std::vector<int64_t>* uniq,
                  std::vector<int32_t>* counts, int64_t size_divisor);
template <typename Index>
void UniqueByParallelHash(const int64_t* ids, int64_t n, Index* inverse, std::vector<int64_t>* uniq,
                          std::vector<int32_t>* counts, int64_t size_divisor);

// As UniqueWithCounts, then grouped by partition; offsets gets num_partitions + 1 entries.
template <typename Index>
void UniquePartition(const int64_t* ids, int64_t n, int64_t num_partitions, PartitionStrategy strategy,
                     Index* inverse, std::vector<int64_t>* uniq, std::vector<int32_t>* counts,
                     std::vector<int64_t>* offsets);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_UNIQUE_H_
