// EmbeddingTable: int64 key -> one row [key | value dim | slots k*dim | freq | last_step].
//
// A composition, per index shard (2^kShardBits, chosen by the high bits of Mix64(key)), each
// under a tbb::spin_rw_mutex, of: a TaggedIndex (open addressing over 4-byte slots: row id and
// hash tag; the key lives in its row), a RowArena (the shard's rows: allocation takes no lock
// that another shard's work holds), an AdmissionSketch (sightings of keys without a row) and
// a RemovedLog (keys dropped since the last delta). Batch operations group their keys by shard
// first (ShardOrder), so a batch takes each shard's lock once, and shards are processed in
// parallel (tbb) above kParallelThreshold. Eviction selects rows by policy; this class scans
// and erases them. (Measured against tbb::concurrent_hash_map and std::unordered_map+mutex in
// benchmarks/bench_index.cc; see docs/benchmarks.md.)
//
// Thread-safety: every public method may be called concurrently. Row contents
// are read and written only under their shard's lock (reads under the shared
// lock, updates through Update()'s callback under the exclusive lock); no row
// pointer escapes the table but the one Update() hands its callback, valid only during that
// call (the arena may move once the lock is released; the callback must not call back into
// the table). Lookups only read rows (no write under the shared
// lock); freq and last_step change only in Update(), under the exclusive lock.
// EnsureSlots() and ReplaceRows() take the layout lock and then every shard lock exclusively;
// VisitShards() (exports) holds the layout lock shared and takes the shard locks one at a time,
// so a snapshot has one row layout while training goes on. Methods that allocate throw std::bad_alloc when
// memory runs out (kernels turn it into ResourceExhausted); every lock is a scoped guard, and
// rows and index room are allocated before the table changes, so the table stays as it was.
#ifndef TFPS_KERNELS_CORE_EMBEDDING_TABLE_H_
#define TFPS_KERNELS_CORE_EMBEDDING_TABLE_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include <tbb/spin_rw_mutex.h>

#include "kernels/core/admission_sketch.h"
#include "kernels/core/config.h"
#include "kernels/core/eviction.h"
#include "kernels/core/hash.h"
#include "kernels/core/initializer.h"
#include "kernels/core/removed_log.h"
#include "kernels/core/row_arena.h"
#include "kernels/core/shard_order.h"
#include "kernels/core/tagged_index.h"

namespace tfps {
namespace core {

struct TableStats {
  int64_t rows = 0;
  int64_t bytes_reserved = 0;  // row arenas (pages touched) + index slots + side structures
  int64_t bytes_in_use = 0;    // rows * row bytes + index slots + side structures in use
  int64_t row_bytes = 0;
  int64_t pending = 0;         // keys seen but not admitted yet (estimate, exact without collisions)
  int64_t removed_logged = 0;  // keys in the removed-keys log (incremental checkpoints)
  // Where bytes_reserved goes: the index slots (row id and tag), the row arenas (the pages
  // their rows touched: rows * row_bytes in use -- key, value, slots, 8 bytes of meta -- and
  // slack: freed rows and the rest of the last page; plus a live bit per row), and the
  // admission sketch and removed-keys log.
  int64_t index_bytes = 0;
  int64_t arena_bytes = 0;
  int64_t side_bytes = 0;
};

// The row layout of a table: value dim, optimizer slots per row and their initial values.
struct RowLayout {
  int64_t dim = 0;
  int num_slots = 0;
  std::vector<float> slot_init;  // [num_slots]
};

// A row's meta as the visit API reads and writes it (stored clamped to [0, 2^32 - 1]).
struct RowMeta {
  int64_t freq = 0;       // training updates
  int64_t last_step = 0;  // global step of the last update
};

class EmbeddingTable {
  struct Shard;  // one index shard (below)

 public:
  // admit_min_count: a key gets a row only once training lookups have seen it this many
  // times (1: at once). Until then it reads as a missing key and its updates are dropped.
  // Sightings are counted in a count-min sketch (kSketchDepth x sketch_width counters, config.h):
  // bounded memory whatever the rate of new keys, and an estimate never below the true count.
  // sketch_width: a power of two >= kMinSketchWidth (std::invalid_argument otherwise).
  EmbeddingTable(int64_t dim, const InitSpec& init, uint32_t admit_min_count = 1,
                 int64_t sketch_width = kSketchWidth);
  ~EmbeddingTable();
  EmbeddingTable(const EmbeddingTable&) = delete;
  EmbeddingTable& operator=(const EmbeddingTable&) = delete;

  int64_t dim() const { return dim_; }
  int num_slots() const;
  int64_t size() const;
  const InitSpec& init() const { return init_; }

  // Copies the value of keys[i] to out[i*dim]. A missing key: with `insert`,
  // gets a new row (initializer values, slot init, freq 0) and its value is
  // copied; without, out gets the initializer value (or zeros with
  // missing_zeros) and the table is unchanged. Returns the number of rows inserted.
  // With admission, a missing key's sightings (counts[i], 1 if counts is null) are added to
  // a side table, and the key is admitted once they reach admit_min_count.
  int64_t Lookup(const int64_t* keys, int64_t n, bool insert, bool missing_zeros, float* out,
                 const int32_t* counts = nullptr);

  // Inserts or overwrites the value of each key (slots of new rows get their init).
  void Assign(const int64_t* keys, int64_t n, const float* values);

  // Removes the keys present; their rows go back to the shard's arena. Returns how many.
  int64_t Remove(const int64_t* keys, int64_t n);

  // Calls fn(i, row, updates) under the exclusive lock of keys[i]'s shard for every
  // key present (row points at [value | slots]; updates = the row's freq, the number
  // of earlier updates, e.g. for Adam's per-row bias correction), then counts the
  // update in its freq (saturating) and sets its last_step = step.
  // Missing keys are skipped. Returns the number of rows updated.
  // `batch` (optional): the buffer fn reads for key i at batch + i * batch_bytes (its gradient
  // row), prefetched ahead with the row.
  int64_t Update(const int64_t* keys, int64_t n, int64_t step,
                 const std::function<void(int64_t, float*, uint32_t)>& fn, const void* batch = nullptr,
                 size_t batch_bytes = 0);

  // Removes the rows the policies select (their memory returns to the shard's arena) and
  // returns how many: first the rows any row rule selects, then, in turn, those each ranking
  // rule selects among the rows left (eviction.h). `step` is the current global step.
  int64_t Evict(const std::vector<EvictionPolicy*>& policies, int64_t step);

  // Gives the table k optimizer slots per row, new slot j starting at
  // slot_init[j]. From 0 slots, existing rows are re-laid out. Returns false
  // (and sets *error) when the table already has a different nonzero count.
  bool EnsureSlots(int k, const float* slot_init, std::string* error);

  // The locked visit API (snapshots and deltas are built on it: table_snapshots.h).
  //
  // One index shard under its lock, handed to a VisitShards() callback; valid during it.
  class LockedShard {
   public:
    // Calls fn(key, row, meta) for every row of the shard, in memory order; row = [value dim |
    // slots num_slots * dim], read only.
    void ForEachRow(const std::function<void(int64_t, const float*, const RowMeta&)>& fn) const;
    // In an exclusive visit: appends the keys removed at or after since_step to *keys and
    // empties the shard's removed-keys log; true when the log had overflowed (RemovedLog::Take).
    bool TakeRemoved(int64_t since_step, std::vector<int64_t>* keys);
    // Rows in the shard.
    int64_t rows() const { return s_.index.size(); }

   private:
    friend class EmbeddingTable;
    LockedShard(const EmbeddingTable& t, Shard& s, bool exclusive) : t_(t), s_(s), exclusive_(exclusive) {}
    const EmbeddingTable& t_;
    Shard& s_;
    const bool exclusive_;
  };
  // Holds the row layout fixed (the layout lock, shared), calls begin(layout) once, then
  // fn(shard) for each index shard in turn under its lock (exclusive with `exclusive`), so each
  // row is seen whole at one moment while training goes on in the other shards. (const: an
  // exclusive visit may empty the removed-keys logs, which are not contents.)
  void VisitShards(bool exclusive, const std::function<void(const RowLayout&)>& begin,
                   const std::function<void(LockedShard&)>& fn) const;
  // Every index shard's lock at once (shared: lookups go on, writers wait) and the layout's:
  // begin(layout, rows) with the table's row count, then fn(shard) for each index shard, all
  // from one moment -- what a save that writes into buffers sized in advance needs.
  void VisitAllShards(const std::function<void(const RowLayout&, int64_t)>& begin,
                      const std::function<void(LockedShard&)>& fn) const;
  // Calls fn(i, row, meta) under the exclusive lock of keys[i]'s shard for every key present
  // (row = [value | slots]); the meta fn leaves is stored (clamped). Missing keys are skipped.
  // Returns the number of rows visited.
  int64_t ModifyRows(const int64_t* keys, int64_t n,
                     const std::function<void(int64_t, float*, RowMeta*)>& fn);
  // Replaces the contents with n rows of `layout`: key keys[i], its [value | slots] and meta
  // written by fill(i, row). Built aside first: false and *error (table unchanged) when a key
  // appears twice; running out of memory (std::bad_alloc) leaves the table as it was too. The
  // admission sketch and the removed-keys log are kept.
  bool ReplaceRows(const RowLayout& layout, const int64_t* keys, int64_t n,
                   const std::function<RowMeta(int64_t, float*)>& fill, std::string* error);
  // ReplaceRows in two steps, for a restore that must change every table or none: BuildRows
  // makes the new contents aside (the table unchanged; nullptr and *error as ReplaceRows; the
  // layout is checked against the table's dim) and SwapIn puts them in, freeing the old rows.
  // fill(i, row) is called for i = 0, 1, ..., n-1 in order.
  struct Staged;
  std::shared_ptr<Staged> BuildRows(const RowLayout& layout, const int64_t* keys, int64_t n,
                                    const std::function<RowMeta(int64_t, float*)>& fill, std::string* error) const;
  void SwapIn(Staged* staged);
  static int64_t StagedRows(const Staged& staged);

  // Incremental checkpoints. Remove and Evict log the keys they drop, stamped with the latest
  // step the table has seen (updates, evictions, imported rows: NoteStep), only while tracking
  // is on (SetTrackRemoved(true)); turning it off drops the log. `step` (the caller's current
  // step) is the earliest stamp from now on.
  void SetTrackRemoved(bool on, int64_t step = 0);
  void NoteStep(int64_t step) { removal_.NoteStep(step); }
  // Forgets the removed keys logged so far.
  void ResetRemoved();

  // Admission sketch: kSketchDepth * sketch_width counters, by index shard (empty when
  // admit_min_count is 1). The element-wise max of sketches of tables that hold different
  // keys (the shards of a variable) never under-counts a key of any of them.
  int64_t admission_size() const { return admit_min_count_ > 1 ? kSketchDepth * sketch_width_ : 0; }
  void ExportAdmission(std::vector<int32_t>* counts) const;
  // Replaces the sketch (counts clipped to [0, 65535]). A sketch of another power-of-two width
  // is folded in (wider: the max of the cells that meet) or repeated (narrower), which keeps
  // every estimate at or above what it was; a size that is not kSketchDepth times a power of
  // two >= kNumShards returns false with *error and leaves the sketch as it was.
  bool ImportAdmission(const int32_t* counts, int64_t n, std::string* error);
  // Whether ImportAdmission takes a sketch of n counters (else false and *error): what a restore
  // checks before it changes anything.
  static bool AdmissionSizeFits(int64_t n, std::string* error);

  TableStats Stats() const;
  // How this table's batch paths prefetch (config.h), and from how many bytes of rows per
  // shard (tests give 0, so that small tables take the prefetching paths too). Results never
  // depend on it. Returns the mode it replaced.
  PrefetchMode SetPrefetch(PrefetchMode mode, int64_t min_shard_bytes = kPrefetchMinShardBytes);

 private:
  static constexpr int kNumShards = kNumIndexShards;
  using ReadLock = tbb::spin_rw_mutex::scoped_lock;

  // Two cache lines; the lock, the index and the arena pointer, which every batch path reads,
  // share the first.
  struct alignas(64) Shard {
    mutable tbb::spin_rw_mutex mu;
    TaggedIndex index;
    std::unique_ptr<RowArena> rows;  // this shard's rows; replaced only under its lock
    AdmissionSketch sketch;          // only with admit_min_count > 1
    RemovedLog removed;              // only while tracking is on
  };
  // Holds every shard lock (exclusive) for its scope.
  class AllShardsLock {
   public:
    explicit AllShardsLock(const EmbeddingTable& t) : t_(t) { t_.LockAll(); }
    ~AllShardsLock() { t_.UnlockAll(); }
    AllShardsLock(const AllShardsLock&) = delete;
    AllShardsLock& operator=(const AllShardsLock&) = delete;

   private:
    const EmbeddingTable& t_;
  };

  // A row's layout: [key (8 bytes) | value dim | slots num_slots * dim | freq | last_step].
  // Every API below and the Update callbacks see `row` = the value (row + kKeyFloats).
  static constexpr int64_t kKeyFloats = 2;
  static int64_t KeyOfRow(const float* key_at) {
    int64_t key;
    std::memcpy(&key, key_at, sizeof(key));
    return key;
  }
  static float* ValueAt(const Shard& s, int64_t pos) { return s.rows->Row(s.index.IdAt(pos)) + kKeyFloats; }
  // The index's view of the shard's rows: the key of row id, and its hash.
  static auto KeyOf(const Shard& s) {
    return [&s](uint32_t id) { return KeyOfRow(s.rows->Row(id)); };
  }
  static auto HashOf(const Shard& s) {
    return [&s](uint32_t id) { return HashKey(KeyOfRow(s.rows->Row(id))); };
  }
  static int64_t Find(const Shard& s, uint64_t h, int64_t key) { return s.index.Find(h, key, KeyOf(s)); }
  // Groups the keys by shard (ShardOrder) and calls fn(shard, idx, h, m) once per nonempty
  // shard, where idx[0..m) are positions in keys, ascending (a key repeated in the batch is
  // met in batch order), and h their hashes; shards run in parallel for large batches. fn
  // takes the shard's lock itself.
  void ForEachShard(const int64_t* keys, int64_t n,
                    const std::function<void(Shard&, const int64_t*, const uint64_t*, int64_t)>& fn) const;
  // How the shard's batch paths prefetch: the table's mode, or kOff while its rows take less
  // than the table's threshold (they stay in cache).
  PrefetchMode PrefetchModeOf(const Shard& s) const;
  // Calls visit(j) for j in [0, m) in order, prefetching ahead as PrefetchModeOf() says: the
  // home slots of the keys idx[j + ...], then the first row_bytes of the rows (from the key) their tags lead to and,
  // with a `batch` (the caller's buffer of batch_bytes per key: output, gradients, values),
  // the key's part of it, which the shard order visits out of the batch's order. visit finds
  // its key itself (a cache hit by then), so it may change the index (Remove).
  template <typename Visit>
  void Prefetched(const Shard& s, const int64_t* idx, const uint64_t* h, int64_t m,
                  size_t row_bytes, const void* batch, size_t batch_bytes, const Visit& visit) const;
  // Grows the shard's index so that `more` inserts fit under kMaxLoadFactor (may throw). The
  // new index is built from the rows, read in id order.
  static void ReserveLocked(Shard* s, int64_t more);
  // Calls fn(id, row value) for every live row of the shard, in id order (memory order).
  template <typename Fn>
  static void ForEachRow(const Shard& s, const Fn& fn) {
    const uint32_t end = s.rows->end();
    for (uint32_t id = 0; id < end; ++id) {
      if (s.rows->Live(id)) fn(id, s.rows->Row(id) + kKeyFloats);
    }
  }
  // Rows for the keys idx[missing[..]] not in the shard yet: room and rows first (may throw,
  // nothing changed), then init(j, row) and insertion; a key repeated in the batch gets one row.
  // Calls use(j, row) for every missing[..] with its (new or found) row. Returns rows added.
  // (A template defined and used in embedding_table.cc only.)
  template <typename Init, typename Use>
  int64_t InsertRowsLocked(Shard* s, const int64_t* keys, const int64_t* idx, const uint64_t* h,
                           const std::vector<int64_t>& missing, const Init& init, const Use& use);
  // Takes slot pos out of the index and frees its row.
  static void EraseLocked(Shard* s, int64_t pos);
  // Logs a removed key while tracking is on, then erases slot pos.
  void RemoveLocked(Shard* s, int64_t key, int64_t pos) const;
  void InitNewRow(int64_t key, float* row) const;  // initialiser values, slot init, zero meta
  void InitSlotsAndMeta(float* row) const;          // slot init, zero meta
  static void WriteMeta(uint32_t* meta, int64_t freq, int64_t last_step);  // clamped to uint32
  // Floats per row with `slots` optimizer slots: key, value, slots, meta; even, so that every
  // row's key is 8-byte aligned.
  int64_t StrideFor(int slots) const { return (kKeyFloats + dim_ * (1 + slots) + 2 + 1) / 2 * 2; }
  int64_t stride_floats() const { return StrideFor(num_slots_); }
  // A shard's empty arena for rows of `slots` optimizer slots.
  std::unique_ptr<RowArena> NewArena(int slots) const { return std::make_unique<RowArena>(StrideFor(slots)); }
  uint32_t* Meta(float* row) const {
    return reinterpret_cast<uint32_t*>(row + dim_ * (1 + num_slots_));
  }
  void LockAll() const;
  void UnlockAll() const;

  const int64_t dim_;
  const InitSpec init_;
  const uint32_t admit_min_count_;
  const int64_t sketch_width_;        // counters per sketch row, over all index shards
  RemovalTracking removal_;           // whether removals are logged, and their stamp
  std::atomic<int> prefetch_mode_{static_cast<int>(PrefetchMode::kRolling)};   // SetPrefetch
  std::atomic<int64_t> prefetch_min_shard_bytes_{kPrefetchMinShardBytes};
  // Held shared by exports, exclusive (before every shard lock) where the row layout changes.
  mutable std::shared_mutex layout_mu_;
  int num_slots_ = 0;                 // changes only with layout_mu_ and every shard locked
  std::vector<float> slot_init_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_EMBEDDING_TABLE_H_
