// Tunables of the tfps core, one place, one doc line each.
#ifndef TFPS_KERNELS_CORE_CONFIG_H_
#define TFPS_KERNELS_CORE_CONFIG_H_

#include <cstdint>

namespace tfps {
namespace core {

// log2 of the number of index shards per table; each shard has its own
// reader-writer lock, so 64 shards keep two threads from meeting.
constexpr int kShardBits = 6;
// Initial capacity (slots) of one index shard. An index slot is 4 bytes: a row id and a tag
// of the key's hash (kTagBits), so a probe rarely reads a row that is not the key's.
constexpr int64_t kShardInitialCapacity = 16;
constexpr int kTagBits = 7;
constexpr int kIdBits = 32 - kTagBits;
// Rows one index shard can hold (ids are kIdBits wide, 0 marks an empty slot): with
// 2^kShardBits shards, 2^31 rows per table. Past it an insert is ResourceExhausted.
constexpr int64_t kMaxRowsPerShard = (int64_t{1} << kIdBits) - 1;
// An index shard grows by kIndexGrowth once its size would exceed kMaxLoadFactor of its
// capacity (any capacity: slots are found by multiply-shift, not a mask), so its load stays
// between 0.53 and 0.8: 5 to 7.5 bytes of index per key. Growth rebuilds the index from the
// rows (read in memory order): 1.5x rebuilds 3x the final size in all, 1.25x did 5x (filling
// 5*10^7 keys: 0.63x DenseHashTable's insert rate), 2x would leave 10 bytes per key.
constexpr double kMaxLoadFactor = 0.8;
constexpr double kIndexGrowth = 1.5;
// Widest row a table accepts (value dim; slots multiply it): larger is InvalidArgument.
constexpr int64_t kMaxDim = int64_t{1} << 24;
// Most floats one output of a kernel may have (a 4 TiB tensor): past it, a size is an error.
constexpr int64_t kMaxOutputFloats = int64_t{1} << 40;
// Most partitions (shards, PS tasks) unique_partition splits ids into.
constexpr int64_t kMaxPartitions = int64_t{1} << 16;
// Unique, scatter-add and the tables' sort by shard split a large batch into one piece per
// thread the caller may use (its WithThreads budget: the session's threads; at most this many;
// ParallelParts() in parallel.h), merged in piece order.
constexpr int kMaxParallelParts = 16;
// The tables' sort of a batch by shard is split over threads from this many keys. Below,
// with other table ops running at once (a PS serving several workers) the split costs more
// than it saves: bench_op_mix (batches of 100k keys from 2 threads) ran 34.4-36.4 M keys/s with
// the sort on one thread, 31.8-34.6 split; alone, a 2^20-key lookup spent 16% of its CPU
// samples in the sort on one thread while the other core waited.
constexpr int64_t kParallelSortMinKeys = int64_t{1} << 18;
// Batches of at least this many keys are split over threads (tbb::parallel_for).
constexpr int64_t kParallelThreshold = 16384;
// Grain of tbb::parallel_for over keys.
constexpr int64_t kParallelGrain = 4096;
// Admission: sightings of keys without a row are counted in a count-min sketch of
// kSketchDepth rows of `width` 16-bit counters per table (bounded memory, no cliff: a key is
// admitted once its estimate, never below its true count, reaches the threshold). The width is
// a per-table option (a power of two >= kMinSketchWidth); kSketchWidth is its default (8 MiB):
// false admissions stay rare while the keys pending at once are well under width / 4.
constexpr int kSketchDepth = 4;
constexpr int64_t kSketchWidth = int64_t{1} << 20;
constexpr int64_t kMinSketchWidth = int64_t{1} << 12;
constexpr int64_t kMaxSketchWidth = int64_t{1} << 26;
// The sketch halves every counter once this many times its width in sightings have been
// counted (TinyLFU's reset): sightings further apart than that fade instead of piling up.
constexpr int64_t kSketchAgeFactor = 8;
// Removed-keys log for incremental checkpoints (kept only while they are on): past this
// many keys in one index shard the log is dropped and the next delta carries every row.
constexpr int64_t kMaxRemovedPerShard = int64_t{1} << 16;
// Unique splits a batch over ParallelParts() threads from this many ids when the sampled
// estimate says ids repeat (under n/2 distinct), and from the second when they do not
// (measured in benchmarks/bench_unique_paths.cc; see kernels/core/unique.h).
constexpr int64_t kParallelUniqueMinNSkewed = 1 << 18;
constexpr int64_t kParallelUniqueMinNDistinct = 1 << 20;
// A pass over the inverse (one gather from a small table per id) is split over threads
// only from this many ids: below, waking the workers costs more than it saves.
constexpr int64_t kParallelRemapMinN = 1 << 18;
// Prefetching on the table's batch paths (lookup, find-or-insert, sparse apply, assign,
// remove): each key's index slot is fetched 2 * kPrefetchDistance keys ahead and the row it
// leads to kPrefetchDistance keys ahead, so that the misses of many keys overlap. kGroup does
// it per window of 2 * kPrefetchDistance keys (slots, then rows, then the work). (Export,
// eviction, index growth and slot re-layout read rows in memory order instead.) Results never
// depend on it. kRolling is the default; a table's SetPrefetch (the op TfpsSetPrefetchMode,
// _core.Table.set_prefetch) changes it for that table, so tests and benchmarks compare modes.
// A shard prefetches only once its rows take kPrefetchMinShardBytes (a table of 64 shards:
// 32 MiB): below, its rows stay in cache and the prefetches only cost (10^5 keys, dim 16:
// 52-53 M lookups/s off, 30-32 rolling; 10^6: 31-39 off, 37-40 rolling; bench_scaling).
enum class PrefetchMode : int { kOff = 0, kGroup = 1, kRolling = 2 };
constexpr int64_t kPrefetchDistance = 8;
constexpr int64_t kPrefetchMinShardBytes = int64_t{512} << 10;
// Batch paths write what they write once with streaming stores (which do not read a line
// first and leave it out of the cache) when it takes at least this many bytes: the shard order
// of a batch's keys (16 bytes a key), a lookup's output rows. A smaller output stays in cache
// for whoever reads it next. Measured here (L2 2 MiB a core): the shard order of 76k keys
// (1.2 MiB) streamed made the Adagrad apply that reads it 0.64x as fast; of 2^20 keys (16 MiB)
// it made lookups 1.12x as fast (bench_scaling).
constexpr int64_t kStreamMinBytes = int64_t{4} << 20;
// Dedup tables of skewed batches are sized for EstimateDistinct / this (the sampled
// estimate runs 2-3x high on skewed ids; a low guess costs one doubling).
constexpr int64_t kSkewedSizeDivisor = 2;
// A table's rows may not take the machine's memory below this share of it (memory_guard.h):
// the growth that would is ResourceExhausted instead of the OOM killer's kill -9.
constexpr double kMemoryReserveFraction = 0.05;
// The machine's available memory is read again once this much has been granted since.
constexpr int64_t kMemoryRecheckBytes = int64_t{64} << 20;

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_CONFIG_H_
