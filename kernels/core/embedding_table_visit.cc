// EmbeddingTable's locked visit API: whole shards under their locks, rows by key under their
// shard's lock, and contents replaced at once. Snapshots and deltas (table_snapshots.cc) are
// built on it.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/hash.h"

namespace tfps {
namespace core {

void EmbeddingTable::LockedShard::ForEachRow(
    const std::function<void(int64_t, const float*, const RowMeta&)>& fn) const {
  EmbeddingTable::ForEachRow(s_, [&](uint32_t, float* row) {
    const uint32_t* meta = t_.Meta(row);
    fn(KeyOfRow(row - kKeyFloats), row, RowMeta{meta[0], meta[1]});
  });
}

bool EmbeddingTable::LockedShard::TakeRemoved(int64_t since_step, std::vector<int64_t>* keys) {
  if (!exclusive_) throw std::logic_error("LockedShard::TakeRemoved needs an exclusive visit");
  return s_.removed.Take(since_step, keys);
}

void EmbeddingTable::VisitShards(bool exclusive, const std::function<void(const RowLayout&)>& begin,
                                 const std::function<void(LockedShard&)>& fn) const {
  std::shared_lock<std::shared_mutex> layout(layout_mu_);
  begin(RowLayout{dim_, num_slots_, slot_init_});  // fixed while layout_mu_ is held
  for (int i = 0; i < kNumShards; ++i) {
    Shard& s = shards_[i];
    ReadLock lock(s.mu, exclusive);
    LockedShard locked(*this, s, exclusive);
    fn(locked);
  }
}

void EmbeddingTable::VisitAllShards(const std::function<void(const RowLayout&, int64_t)>& begin,
                                    const std::function<void(LockedShard&)>& fn) const {
  std::shared_lock<std::shared_mutex> layout(layout_mu_);
  for (int i = 0; i < kNumShards; ++i) shards_[i].mu.lock_shared();
  struct Unlock {
    const EmbeddingTable& t;
    ~Unlock() {
      for (int i = kNumShards - 1; i >= 0; --i) t.shards_[i].mu.unlock_shared();
    }
  } unlock{*this};
  int64_t rows = 0;
  for (int i = 0; i < kNumShards; ++i) rows += shards_[i].index.size();
  begin(RowLayout{dim_, num_slots_, slot_init_}, rows);
  for (int i = 0; i < kNumShards; ++i) {
    LockedShard locked(*this, shards_[i], false);
    fn(locked);
  }
}

int64_t EmbeddingTable::ModifyRows(const int64_t* keys, int64_t n,
                                   const std::function<void(int64_t, float*, RowMeta*)>& fn) {
  std::atomic<int64_t> visited{0};
  ForEachShard(keys, n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    ReadLock lock(s.mu, true);
    int64_t here = 0;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = idx[j];
      const int64_t pos = Find(s, h[j], keys[i]);
      if (pos < 0) continue;
      float* row = ValueAt(s, pos);
      uint32_t* meta = Meta(row);
      RowMeta m_now{meta[0], meta[1]};
      fn(i, row, &m_now);
      WriteMeta(meta, m_now.freq, m_now.last_step);
      ++here;
    }
    visited.fetch_add(here, std::memory_order_relaxed);
  });
  return visited.load();
}

// The contents a BuildRows made aside: one fresh shard per index shard, and the row layout.
struct EmbeddingTable::Staged {
  RowLayout layout;
  std::unique_ptr<Shard[]> shards;
  int64_t latest = 0;   // the latest last_step of its rows
  int64_t rows = 0;
};

std::shared_ptr<EmbeddingTable::Staged> EmbeddingTable::BuildRows(
    const RowLayout& layout, const int64_t* keys, int64_t n, const std::function<RowMeta(int64_t, float*)>& fill,
    std::string* error) const {
  if (layout.dim != dim_ || layout.num_slots < 0 || static_cast<int64_t>(layout.slot_init.size()) != layout.num_slots) {
    *error = "row layout (dim " + std::to_string(layout.dim) + ", " + std::to_string(layout.num_slots) +
             " slots) does not fit the table's dim " + std::to_string(dim_);
    return nullptr;
  }
  // Index, arenas and rows are built aside, so a repeated key or running out of memory
  // (std::bad_alloc) leaves the table as it was.
  auto staged = std::make_shared<Staged>();
  staged->layout = layout;
  staged->shards.reset(new Shard[kNumShards]);
  Shard* fresh = staged->shards.get();
  std::vector<int64_t> per_shard(kNumShards, 0);
  for (int64_t i = 0; i < n; ++i) ++per_shard[IndexShardOf(HashKey(keys[i]))];
  std::vector<std::vector<uint32_t>> ids(kNumShards);
  for (int i = 0; i < kNumShards; ++i) {
    fresh[i].rows = NewArena(layout.num_slots);
    ReserveLocked(&fresh[i], per_shard[i]);
    ids[i].resize(per_shard[i]);
    fresh[i].rows->Allocate(per_shard[i], ids[i].data());
  }
  std::vector<int64_t> used(kNumShards, 0);
  const int64_t meta_at = dim_ * (1 + layout.num_slots);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t key = keys[i];
    const uint64_t h = HashKey(key);
    const int shard = IndexShardOf(h);
    Shard& s = fresh[shard];
    if (Find(s, h, key) >= 0) {
      *error = "key " + std::to_string(key) + " appears twice in the snapshot";
      return nullptr;
    }
    const uint32_t id = ids[shard][used[shard]++];
    std::memcpy(s.rows->Row(id), &key, sizeof(key));
    float* row = s.rows->Row(id) + kKeyFloats;
    const RowMeta meta = fill(i, row);
    WriteMeta(reinterpret_cast<uint32_t*>(row + meta_at), meta.freq, meta.last_step);
    staged->latest = std::max(staged->latest, meta.last_step);
    s.index.Insert(h, id);
  }
  staged->rows = n;
  return staged;
}

void EmbeddingTable::SwapIn(Staged* staged) {
  std::vector<float> slot_init = staged->layout.slot_init;
  {
    std::unique_lock<std::shared_mutex> layout_lock(layout_mu_);
    AllShardsLock lock(*this);
    // The new rows fix the row layout; the old rows go to `staged` (freed with it, outside the locks).
    num_slots_ = staged->layout.num_slots;
    slot_init_.swap(slot_init);
    for (int i = 0; i < kNumShards; ++i) {
      shards_[i].index.Swap(staged->shards[i].index);
      shards_[i].rows.swap(staged->shards[i].rows);
    }
    removal_.NoteStep(staged->latest);
  }
  staged->shards.reset();
}

int64_t EmbeddingTable::StagedRows(const Staged& staged) { return staged.rows; }

bool EmbeddingTable::ReplaceRows(const RowLayout& layout, const int64_t* keys, int64_t n,
                                 const std::function<RowMeta(int64_t, float*)>& fill, std::string* error) {
  std::shared_ptr<Staged> staged = BuildRows(layout, keys, n, fill, error);
  if (staged == nullptr) return false;
  SwapIn(staged.get());
  return true;
}

}  // namespace core
}  // namespace tfps
