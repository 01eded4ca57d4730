// EmbeddingTable maintenance: eviction, and the snapshots behind checkpoints (full and
// incremental export, import). The table itself is in embedding_table.cc.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/hash.h"

namespace tfps {
namespace core {

int64_t EmbeddingTable::Evict(const EvictPolicy& policy, int64_t step) {
  int64_t evicted = 0;
  // Rule-based eviction, one shard at a time under its exclusive lock.
  auto doomed = [&](float* row) {
    const uint32_t* meta = Meta(row);
    if (policy.after_steps >= 0 && step - static_cast<int64_t>(meta[1]) > policy.after_steps) return true;
    if (policy.min_freq >= 0 && static_cast<int64_t>(meta[0]) < policy.min_freq) return true;
    if (policy.l2_below >= 0.f) {
      double sq = 0;
      for (int64_t j = 0; j < dim_; ++j) sq += static_cast<double>(row[j]) * row[j];
      if (sq < static_cast<double>(policy.l2_below) * policy.l2_below) return true;
    }
    return false;
  };
  auto erase_if = [&](Shard& s, const std::function<bool(int64_t, float*)>& pred) {
    int64_t n = 0;
    for (int64_t pos = 0; pos < static_cast<int64_t>(s.slots.size());) {
      Slot& e = s.slots[pos];
      if (e.row != nullptr && pred(e.key, e.row)) {
        LogRemovedLocked(&s, e.key);
        s.pool->Free(e.row);
        EraseLocked(&s, pos);  // backward shift may move another entry into pos: look again
        ++n;
      } else {
        ++pos;
      }
    }
    return n;
  };
  const bool rules = policy.after_steps >= 0 || policy.min_freq >= 0 || policy.l2_below >= 0.f;
  for (int i = 0; rules && i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, true);
    evicted += erase_if(shards_[i], [&](int64_t, float* row) { return doomed(row); });
  }
  if (policy.max_rows < 0) return evicted;
  // Size cap: rank all rows by (freq or last_step) and drop the lowest until max_rows remain.
  LockAll();
  std::vector<std::pair<uint32_t, int64_t>> score;
  for (int i = 0; i < kNumShards; ++i) {
    for (const Slot& e : shards_[i].slots) {
      if (e.row != nullptr) score.push_back({Meta(e.row)[policy.lru ? 1 : 0], e.key});
    }
  }
  const int64_t excess = static_cast<int64_t>(score.size()) - policy.max_rows;
  if (excess > 0) {
    std::nth_element(score.begin(), score.begin() + excess, score.end());
    std::vector<int64_t> keys;
    for (int64_t k = 0; k < excess; ++k) keys.push_back(score[k].second);
    for (int64_t key : keys) {
      const uint64_t h = HashKey(key);
      Shard& s = shards_[ShardOf(h)];
      const int64_t pos = Find(s, h, key);
      LogRemovedLocked(&s, key);
      s.pool->Free(s.slots[pos].row);
      EraseLocked(&s, pos);
    }
    evicted += excess;
  }
  UnlockAll();
  return evicted;
}

void EmbeddingTable::ExportRows(int64_t since_step, bool updated_only, TableSnapshot* snap,
                                std::vector<int64_t>* removed) const {
  // Every shard lock shared for the whole copy: the row layout (num_slots_) cannot change
  // under the snapshot, and the rows of all shards come from one moment.
  LockAllShared();
  snap->dim = dim_;
  snap->num_slots = num_slots_;
  snap->slot_init = slot_init_;
  int64_t rows = 0;
  for (int i = 0; i < kNumShards; ++i) rows += shards_[i].size;
  const int64_t slot_floats = dim_ * num_slots_;
  snap->keys.clear();
  snap->values.clear();
  snap->slots.clear();
  snap->freq.clear();
  snap->last_step.clear();
  if (removed != nullptr) removed->clear();
  try {
    if (!updated_only) {
      snap->keys.reserve(rows);
      snap->values.reserve(rows * dim_);
      snap->slots.reserve(rows * slot_floats);
      snap->freq.reserve(rows);
      snap->last_step.reserve(rows);
    }
    for (int i = 0; i < kNumShards; ++i) {
      for (const Slot& e : shards_[i].slots) {
        if (e.row == nullptr) continue;
        const uint32_t* meta = Meta(e.row);
        if (updated_only && (static_cast<int64_t>(meta[1]) < since_step || meta[0] == 0)) continue;
        snap->keys.push_back(e.key);
        snap->values.insert(snap->values.end(), e.row, e.row + dim_);
        snap->slots.insert(snap->slots.end(), e.row + dim_, e.row + dim_ + slot_floats);
        snap->freq.push_back(meta[0]);
        snap->last_step.push_back(meta[1]);
      }
      if (removed != nullptr) removed->insert(removed->end(), shards_[i].removed.begin(), shards_[i].removed.end());
    }
  } catch (const std::bad_alloc&) {
    UnlockAllShared();
    throw;
  }
  UnlockAllShared();
}

void EmbeddingTable::ExportDelta(int64_t since_step, TableSnapshot* snap, std::vector<int64_t>* removed,
                                 bool* complete) const {
  bool overflowed = false;
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, false);
    overflowed = overflowed || shards_[i].removed_overflowed;
  }
  // A removal logged after this check is in the log (or sets overflowed) for the next delta.
  *complete = overflowed;
  ExportRows(since_step, /*updated_only=*/!overflowed, snap, removed);
  if (overflowed) removed->clear();
}

void EmbeddingTable::SetTrackRemoved(bool on) {
  track_removed_.store(on, std::memory_order_relaxed);
  if (!on) ResetRemoved();
}

void EmbeddingTable::ResetRemoved() {
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, true);
    std::vector<int64_t>().swap(shards_[i].removed);
    shards_[i].removed_overflowed = false;
  }
}

bool EmbeddingTable::CheckSnapshot(const TableSnapshot& snap, int64_t dim, std::string* error) {
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  if (snap.dim != dim) {
    *error = "dim " + std::to_string(snap.dim) + " does not match the table's dim " + std::to_string(dim);
    return false;
  }
  if (snap.num_slots < 0 || static_cast<int64_t>(snap.values.size()) != n * dim ||
      static_cast<int64_t>(snap.slots.size()) != n * dim * snap.num_slots ||
      static_cast<int64_t>(snap.freq.size()) != n || static_cast<int64_t>(snap.last_step.size()) != n ||
      static_cast<int64_t>(snap.slot_init.size()) != snap.num_slots) {
    *error = "snapshot parts have inconsistent sizes";
    return false;
  }
  return true;
}

bool EmbeddingTable::ImportDelta(const TableSnapshot& snap, const std::vector<int64_t>& removed, bool complete,
                                 std::string* error) {
  if (!CheckSnapshot(snap, dim_, error)) return false;
  if (complete) return Import(snap, error);
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  if (n > 0 && snap.num_slots != num_slots() && num_slots() != 0) {
    *error = "delta rows have " + std::to_string(snap.num_slots) + " optimizer slots, the table has " +
             std::to_string(num_slots());
    return false;
  }
  if (n > 0 && snap.num_slots != num_slots() && !EnsureSlots(snap.num_slots, snap.slot_init.data(), error)) {
    return false;
  }
  Remove(removed.data(), static_cast<int64_t>(removed.size()));
  Assign(snap.keys.data(), n, snap.values.data());
  const int64_t slot_floats = dim_ * num_slots_;
  // Slots and meta of the rows just written (a row removed meanwhile by another op is skipped).
  ForEachShard(snap.keys.data(), n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    ReadLock lock(s.mu, true);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = idx[j];
      const int64_t pos = Find(s, h[j], snap.keys[i]);
      if (pos < 0) continue;
      float* row = s.slots[pos].row;
      if (slot_floats > 0) std::memcpy(row + dim_, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
      uint32_t* meta = Meta(row);
      meta[0] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.freq[i], UINT32_MAX)));
      meta[1] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.last_step[i], UINT32_MAX)));
    }
  });
  return true;
}

void EmbeddingTable::Export(TableSnapshot* snap) const { ExportRows(0, /*updated_only=*/false, snap, nullptr); }

bool EmbeddingTable::Import(const TableSnapshot& snap, std::string* error) {
  if (!CheckSnapshot(snap, dim_, error)) return false;
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  // Everything the new contents need is allocated before the table changes, so running out
  // of memory (std::bad_alloc) leaves it as it was.
  std::unique_ptr<Shard[]> fresh(new Shard[kNumShards]);
  std::vector<int64_t> per_shard(kNumShards, 0);
  for (int64_t i = 0; i < n; ++i) ++per_shard[ShardOf(HashKey(snap.keys[i]))];
  std::vector<std::vector<float*>> rows(kNumShards);
  for (int i = 0; i < kNumShards; ++i) {
    fresh[i].slots.assign(kShardInitialCapacity, Slot{0, nullptr});
    fresh[i].pool = NewPool(snap.num_slots);
    rows[i].resize(per_shard[i]);
    fresh[i].pool->Allocate(per_shard[i], rows[i].data());
  }
  const int64_t slot_floats = dim_ * snap.num_slots;
  std::vector<int64_t> used(kNumShards, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t key = snap.keys[i];
    const uint64_t h = HashKey(key);
    const int shard = ShardOf(h);
    Shard& s = fresh[shard];
    const int64_t pos = Find(s, h, key);  // a repeated key: the last row wins
    float* row = pos >= 0 ? s.slots[pos].row : rows[shard][used[shard]++];
    std::memcpy(row, &snap.values[i * dim_], sizeof(float) * dim_);
    if (slot_floats > 0) std::memcpy(row + dim_, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
    uint32_t* meta = reinterpret_cast<uint32_t*>(row + dim_ * (1 + snap.num_slots));
    meta[0] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.freq[i], UINT32_MAX)));
    meta[1] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.last_step[i], UINT32_MAX)));
    if (pos < 0) InsertLocked(&s, h, key, row);
  }
  for (int i = 0; i < kNumShards; ++i) {
    for (size_t k = used[i]; k < rows[i].size(); ++k) fresh[i].pool->Free(rows[i][k]);
  }
  LockAll();
  // The old rows die with the old pools; the snapshot fixes the row layout. The admission
  // sketch and the removed-keys log are kept (the sketch has its own import).
  num_slots_ = snap.num_slots;
  slot_init_ = snap.slot_init;
  for (int i = 0; i < kNumShards; ++i) {
    shards_[i].slots.swap(fresh[i].slots);
    shards_[i].size = fresh[i].size;
    shards_[i].pool.swap(fresh[i].pool);
  }
  UnlockAll();
  return true;
}

void EmbeddingTable::ExportAdmission(std::vector<int32_t>* counts) const {
  counts->clear();
  if (admit_min_count_ <= 1) return;
  counts->reserve(admission_size());
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, false);
    counts->insert(counts->end(), shards_[i].sketch.begin(), shards_[i].sketch.end());
  }
}

bool EmbeddingTable::ImportAdmission(const int32_t* counts, int64_t n, std::string* error) {
  if (n == 0) return true;  // saved without admission: nothing pending
  const int64_t mine = admission_size();
  if (mine == 0) return true;  // this table admits at once: sightings do not matter
  const int64_t saved_width = n / kSketchDepth;
  if (n % kSketchDepth != 0 || saved_width < sketch_width_ || saved_width % sketch_width_ != 0 ||
      (saved_width & (saved_width - 1)) != 0) {
    *error = "admission sketch has " + std::to_string(n) + " counters, this table has " + std::to_string(mine) +
             " (a sketch folds only into a narrower power-of-two width)";
    return false;
  }
  // Saved layout: [index shard][row][saved_width / kNumShards]; a cell folds into cell & (w - 1).
  const int64_t from = saved_width / kNumShards, to = sketch_width_ / kNumShards;
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, true);
    Shard& s = shards_[i];
    std::vector<int32_t> sum(kSketchDepth * to, 0);
    for (int r = 0; r < kSketchDepth; ++r) {
      const int32_t* src = counts + (static_cast<int64_t>(i) * kSketchDepth + r) * from;
      for (int64_t j = 0; j < from; ++j) sum[r * to + (j & (to - 1))] += std::max<int32_t>(0, src[j]);
    }
    int64_t pending = 0;  // keys counted but below the threshold, estimated from the first row
    for (int64_t j = 0; j < kSketchDepth * to; ++j) {
      s.sketch[j] = static_cast<uint16_t>(std::min<int32_t>(sum[j], UINT16_MAX));
      if (j < to) pending += (s.sketch[j] > 0 && s.sketch[j] < admit_min_count_) ? 1 : 0;
    }
    s.pending = pending;
  }
  return true;
}

}  // namespace core
}  // namespace tfps
