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
        s.removed.push_back(e.key);
        pool_->Free(e.row);
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
      s.removed.push_back(key);
      pool_->Free(s.slots[pos].row);
      EraseLocked(&s, pos);
    }
    evicted += excess;
  }
  UnlockAll();
  return evicted;
}

void EmbeddingTable::ExportRows(int64_t since_step, bool updated_only, TableSnapshot* snap,
                                std::vector<int64_t>* removed) const {
  snap->dim = dim_;
  snap->keys.clear();
  snap->values.clear();
  snap->slots.clear();
  snap->freq.clear();
  snap->last_step.clear();
  if (removed != nullptr) removed->clear();
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, false);
    if (i == 0) {
      snap->num_slots = num_slots_;
      snap->slot_init = slot_init_;
    }
    const int64_t slot_floats = dim_ * num_slots_;
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
}

void EmbeddingTable::ExportDelta(int64_t since_step, TableSnapshot* snap, std::vector<int64_t>* removed) const {
  ExportRows(since_step, /*updated_only=*/true, snap, removed);
}

void EmbeddingTable::ResetRemoved() {
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, true);
    shards_[i].removed.clear();
  }
}

bool EmbeddingTable::ImportDelta(const TableSnapshot& snap, const std::vector<int64_t>& removed,
                                 std::string* error) {
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  if (snap.dim != dim_) {
    *error = "dim " + std::to_string(snap.dim) + " does not match the table's dim " + std::to_string(dim_);
    return false;
  }
  if (static_cast<int64_t>(snap.values.size()) != n * dim_ ||
      static_cast<int64_t>(snap.slots.size()) != n * dim_ * snap.num_slots ||
      static_cast<int64_t>(snap.freq.size()) != n || static_cast<int64_t>(snap.last_step.size()) != n) {
    *error = "delta parts have inconsistent sizes";
    return false;
  }
  if (n > 0 && snap.num_slots != num_slots() && !EnsureSlots(snap.num_slots, snap.slot_init.data(), error)) {
    return false;
  }
  Remove(removed.data(), static_cast<int64_t>(removed.size()));
  Assign(snap.keys.data(), n, snap.values.data());
  const int64_t slot_floats = dim_ * num_slots_;
  // Slots and meta of the rows just written.
  ForEachShard(snap.keys.data(), n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    ReadLock lock(s.mu, true);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = idx[j];
      float* row = s.slots[Find(s, h[j], snap.keys[i])].row;
      if (slot_floats > 0) std::memcpy(row + dim_, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
      uint32_t* meta = Meta(row);
      meta[0] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.freq[i], UINT32_MAX)));
      meta[1] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.last_step[i], UINT32_MAX)));
    }
  });
  return true;
}

void EmbeddingTable::Export(TableSnapshot* snap) const { ExportRows(0, /*updated_only=*/false, snap, nullptr); }

void EmbeddingTable::Clear() {
  LockAll();
  for (int i = 0; i < kNumShards; ++i) {
    for (Slot& e : shards_[i].slots) {
      if (e.row != nullptr) pool_->Free(e.row);
    }
    shards_[i].slots.assign(kShardInitialCapacity, Slot{0, nullptr});
    shards_[i].size = 0;
    shards_[i].pending.clear();
  }
  UnlockAll();
}

bool EmbeddingTable::Import(const TableSnapshot& snap, std::string* error) {
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  const int64_t slot_floats = dim_ * snap.num_slots;
  if (snap.dim != dim_) {
    *error = "dim " + std::to_string(snap.dim) + " does not match the table's dim " + std::to_string(dim_);
    return false;
  }
  if (snap.num_slots < 0 || static_cast<int64_t>(snap.values.size()) != n * dim_ ||
      static_cast<int64_t>(snap.slots.size()) != n * slot_floats ||
      static_cast<int64_t>(snap.freq.size()) != n || static_cast<int64_t>(snap.last_step.size()) != n ||
      static_cast<int64_t>(snap.slot_init.size()) != snap.num_slots) {
    *error = "snapshot parts have inconsistent sizes";
    return false;
  }
  LockAll();
  // The old rows die with the old pool; the snapshot fixes the row layout.
  pool_.reset(new BucketPool(dim_ * (1 + snap.num_slots) + 2));
  num_slots_ = snap.num_slots;
  slot_init_ = snap.slot_init;
  for (int i = 0; i < kNumShards; ++i) {
    shards_[i].slots.assign(kShardInitialCapacity, Slot{0, nullptr});
    shards_[i].size = 0;
    shards_[i].pending.clear();
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t key = snap.keys[i];
    const uint64_t h = HashKey(key);
    Shard& s = shards_[ShardOf(h)];
    const int64_t pos = Find(s, h, key);
    float* row = pos >= 0 ? s.slots[pos].row : pool_->Allocate();
    std::memcpy(row, &snap.values[i * dim_], sizeof(float) * dim_);
    if (slot_floats > 0) std::memcpy(row + dim_, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
    uint32_t* meta = Meta(row);
    meta[0] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.freq[i], UINT32_MAX)));
    meta[1] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(snap.last_step[i], UINT32_MAX)));
    if (pos < 0) InsertLocked(&s, h, key, row);
  }
  UnlockAll();
  return true;
}

}  // namespace core
}  // namespace tfps
