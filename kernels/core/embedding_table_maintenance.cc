// EmbeddingTable maintenance: eviction, optimizer slots (row re-layout), and the snapshots
// behind checkpoints (full and incremental export, import, the admission sketch). The batch
// paths are in embedding_table.cc.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/hash.h"

namespace tfps {
namespace core {

int64_t EmbeddingTable::Evict(const std::vector<EvictionPolicy*>& policies, int64_t step) {
  int64_t evicted = 0;
  removal_.NoteStep(step);
  std::vector<const EvictionPolicy*> rules;
  std::vector<EvictionPolicy*> rankings;
  for (EvictionPolicy* p : policies) {
    if (p->ranks()) {
      rankings.push_back(p);
    } else {
      rules.push_back(p);
    }
  }
  auto view = [this](float* row) {
    const uint32_t* meta = Meta(row);
    return RowView{KeyOfRow(row - kKeyFloats), row, dim_, meta[0], meta[1]};
  };
  // The row rules, one shard at a time under its exclusive lock: the rows in memory order,
  // then a doomed row's key is found in the index and erased.
  std::vector<int64_t> doomed;
  for (int i = 0; !rules.empty() && i < kNumShards; ++i) {
    Shard& s = shards_[i];
    ReadLock lock(s.mu, true);
    doomed.clear();
    ForEachRow(s, [&](uint32_t, float* row) {
      const RowView r = view(row);
      for (const EvictionPolicy* rule : rules) {
        if (rule->Selects(r, step)) {
          doomed.push_back(r.key);
          break;
        }
      }
    });
    for (int64_t key : doomed) RemoveLocked(&s, key, Find(s, HashKey(key), key));
    evicted += static_cast<int64_t>(doomed.size());
  }
  // Each ranking rule (the size cap) with every shard locked: every row left ranked, then
  // those it selects erased.
  for (EvictionPolicy* ranking : rankings) {
    AllShardsLock lock(*this);
    for (int i = 0; i < kNumShards; ++i) ForEachRow(shards_[i], [&](uint32_t, float* row) { ranking->Rank(view(row)); });
    ranking->Ranked();
    for (int i = 0; i < kNumShards; ++i) {
      Shard& s = shards_[i];
      doomed.clear();
      ForEachRow(s, [&](uint32_t, float* row) {
        const RowView r = view(row);
        if (ranking->Selects(r, step)) doomed.push_back(r.key);
      });
      for (int64_t key : doomed) RemoveLocked(&s, key, Find(s, HashKey(key), key));
      evicted += static_cast<int64_t>(doomed.size());
    }
  }
  return evicted;
}

bool EmbeddingTable::EnsureSlots(int k, const float* slot_init, std::string* error) {
  // Every lock is a scoped guard: an allocation that throws below leaves the table as it was.
  std::unique_lock<std::shared_mutex> layout(layout_mu_);
  AllShardsLock lock(*this);
  if (k != num_slots_ && (num_slots_ != 0 || k < 0)) {
    *error = "table has " + std::to_string(num_slots_) + " optimizer slots per row, asked for " +
             std::to_string(k) + " (one table serves one optimizer)";
    return false;
  }
  std::vector<float> init(slot_init, slot_init + k);
  if (k == num_slots_) {
    slot_init_.swap(init);
    return true;
  }
  // Every new arena first: running out of memory leaves the table as it was. A row keeps its
  // id, so the index stays as it is.
  std::vector<std::unique_ptr<RowArena>> arenas(kNumShards);
  std::vector<uint32_t> ids;
  for (int i = 0; i < kNumShards; ++i) {
    arenas[i] = NewArena(k);
    ids.resize(shards_[i].rows->end());
    arenas[i]->Allocate(static_cast<int64_t>(ids.size()), ids.data());  // ids 0, 1, ... in order
  }
  for (int i = 0; i < kNumShards; ++i) {
    const RowArena& old = *shards_[i].rows;
    RowArena& now = *arenas[i];
    for (uint32_t id = 0; id < old.end(); ++id) {
      const float* from = old.Row(id);
      float* to = now.Row(id);
      if (!old.Live(id)) continue;
      std::memcpy(to, from, sizeof(float) * (kKeyFloats + dim_));  // key and value
      float* value = to + kKeyFloats;
      for (int j = 0; j < k; ++j) std::fill(value + dim_ * (1 + j), value + dim_ * (2 + j), init[j]);
      std::memcpy(value + dim_ * (1 + k), from + kKeyFloats + dim_, 2 * sizeof(uint32_t));  // meta
    }
    for (uint32_t id = old.end(); id-- > 0;) {
      if (!old.Live(id)) now.Free(id);
    }
    shards_[i].rows.swap(arenas[i]);
  }
  num_slots_ = k;
  slot_init_.swap(init);
  return true;
}

void EmbeddingTable::ExportRowsLocked(int64_t since_step, bool updated_only, TableSnapshot* snap, bool take_removed,
                                      std::vector<int64_t>* removed, bool* overflowed) const {
  snap->dim = dim_;
  snap->num_slots = num_slots_;  // fixed while the caller holds layout_mu_
  snap->slot_init = slot_init_;
  const int64_t slot_floats = dim_ * num_slots_;
  snap->keys.clear();
  snap->values.clear();
  snap->slots.clear();
  snap->freq.clear();
  snap->last_step.clear();
  for (int i = 0; i < kNumShards; ++i) {
    Shard& s = shards_[i];
    ReadLock lock(s.mu, /*write=*/take_removed);
    ForEachRow(s, [&](uint32_t, float* row) {
      const uint32_t* meta = Meta(row);
      if (updated_only && (static_cast<int64_t>(meta[1]) < since_step || meta[0] == 0)) return;
      snap->keys.push_back(KeyOfRow(row - kKeyFloats));
      snap->values.insert(snap->values.end(), row, row + dim_);
      snap->slots.insert(snap->slots.end(), row + dim_, row + dim_ + slot_floats);
      snap->freq.push_back(meta[0]);
      snap->last_step.push_back(meta[1]);
    });
    if (!take_removed) continue;
    const bool lost = s.removed.Take(since_step, removed);  // older ones the last delta carried
    *overflowed = *overflowed || lost;
  }
}

void EmbeddingTable::Export(TableSnapshot* snap) const {
  std::shared_lock<std::shared_mutex> layout(layout_mu_);
  ExportRowsLocked(0, /*updated_only=*/false, snap, /*take_removed=*/false, nullptr, nullptr);
}

void EmbeddingTable::ExportDelta(int64_t since_step, TableSnapshot* snap, std::vector<int64_t>* removed,
                                 bool* complete) {
  std::shared_lock<std::shared_mutex> layout(layout_mu_);
  removed->clear();
  bool overflowed = false;
  ExportRowsLocked(since_step, /*updated_only=*/true, snap, /*take_removed=*/true, removed, &overflowed);
  *complete = overflowed;
  if (!overflowed) return;
  // Some shard's log overflowed: removals are unknown, so the delta carries every row instead
  // (a removal after a shard is copied is in its log again, for the next delta).
  removed->clear();
  ExportRowsLocked(0, /*updated_only=*/false, snap, /*take_removed=*/true, removed, &overflowed);
  removed->clear();
}

void EmbeddingTable::SetTrackRemoved(bool on, int64_t step) {
  removal_.NoteStep(step);
  removal_.set_on(on);
  if (!on) ResetRemoved();
}

void EmbeddingTable::ResetRemoved() {
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, true);
    shards_[i].removed.Clear();
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
  for (int64_t step : snap.last_step) removal_.NoteStep(step);
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
      float* row = ValueAt(s, pos);
      if (slot_floats > 0) std::memcpy(row + dim_, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
      WriteMeta(Meta(row), snap.freq[i], snap.last_step[i]);
    }
  });
  return true;
}

bool EmbeddingTable::Import(const TableSnapshot& snap, std::string* error) {
  if (!CheckSnapshot(snap, dim_, error)) return false;
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  // The new contents are built aside -- index, arenas, rows -- before the table changes, so a
  // bad snapshot or running out of memory (std::bad_alloc) leaves it as it was.
  std::unique_ptr<Shard[]> fresh(new Shard[kNumShards]);
  std::vector<int64_t> per_shard(kNumShards, 0);
  for (int64_t i = 0; i < n; ++i) ++per_shard[IndexShardOf(HashKey(snap.keys[i]))];
  std::vector<std::vector<uint32_t>> ids(kNumShards);
  for (int i = 0; i < kNumShards; ++i) {
    fresh[i].rows = NewArena(snap.num_slots);
    ReserveLocked(&fresh[i], per_shard[i]);
    ids[i].resize(per_shard[i]);
    fresh[i].rows->Allocate(per_shard[i], ids[i].data());
  }
  std::vector<float> slot_init = snap.slot_init;
  const int64_t slot_floats = dim_ * snap.num_slots;
  std::vector<int64_t> used(kNumShards, 0);
  int64_t latest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t key = snap.keys[i];
    const uint64_t h = HashKey(key);
    const int shard = IndexShardOf(h);
    Shard& s = fresh[shard];
    if (Find(s, h, key) >= 0) {
      *error = "key " + std::to_string(key) + " appears twice in the snapshot";
      return false;
    }
    const uint32_t id = ids[shard][used[shard]++];
    std::memcpy(s.rows->Row(id), &key, sizeof(key));
    float* row = s.rows->Row(id) + kKeyFloats;
    std::memcpy(row, &snap.values[i * dim_], sizeof(float) * dim_);
    if (slot_floats > 0) std::memcpy(row + dim_, &snap.slots[i * slot_floats], sizeof(float) * slot_floats);
    WriteMeta(reinterpret_cast<uint32_t*>(row + dim_ * (1 + snap.num_slots)), snap.freq[i], snap.last_step[i]);
    latest = std::max(latest, snap.last_step[i]);
    s.index.Insert(h, id);
  }
  std::unique_lock<std::shared_mutex> layout(layout_mu_);
  AllShardsLock lock(*this);
  // The old rows die with the old arenas; the snapshot fixes the row layout. The admission
  // sketch and the removed-keys log are kept (the sketch has its own import).
  num_slots_ = snap.num_slots;
  slot_init_.swap(slot_init);
  for (int i = 0; i < kNumShards; ++i) {
    shards_[i].index.Swap(fresh[i].index);
    shards_[i].rows.swap(fresh[i].rows);
  }
  removal_.NoteStep(latest);
  return true;
}

void EmbeddingTable::ExportAdmission(std::vector<int32_t>* counts) const {
  counts->clear();
  if (admit_min_count_ <= 1) return;
  counts->reserve(admission_size());
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, false);
    const std::vector<uint16_t>& cells = shards_[i].sketch.cells();
    counts->insert(counts->end(), cells.begin(), cells.end());
  }
}

bool EmbeddingTable::ImportAdmission(const int32_t* counts, int64_t n, std::string* error) {
  if (n == 0) return true;  // saved without admission: nothing pending
  if (admission_size() == 0) return true;  // this table admits at once: sightings do not matter
  const int64_t saved_width = n / kSketchDepth;
  if (n % kSketchDepth != 0 || saved_width < kNumShards || (saved_width & (saved_width - 1)) != 0) {
    *error = "admission sketch has " + std::to_string(n) + " counters: not " + std::to_string(kSketchDepth) +
             " rows of a power-of-two width";
    return false;
  }
  // Saved layout: [index shard][row][saved_width / kNumShards]; each shard's part is loaded
  // into that shard's sketch (AdmissionSketch::Loaded), built before its lock is taken.
  const int64_t from = saved_width / kNumShards, to = sketch_width_ / kNumShards;
  for (int i = 0; i < kNumShards; ++i) {
    Shard& s = shards_[i];
    AdmissionSketch loaded =
        AdmissionSketch::Loaded(to, admit_min_count_, counts + static_cast<int64_t>(i) * kSketchDepth * from, from);
    ReadLock lock(s.mu, true);
    s.sketch.Swap(loaded);
  }
  return true;
}

}  // namespace core
}  // namespace tfps
