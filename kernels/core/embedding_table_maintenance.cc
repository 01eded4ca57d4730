// EmbeddingTable maintenance: eviction, optimizer slots (row re-layout), the removed-keys log
// and the admission sketch. The batch paths are in embedding_table.cc, the locked visit API in
// embedding_table_visit.cc.
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

bool EmbeddingTable::AdmissionSizeFits(int64_t n, std::string* error) {
  if (n == 0) return true;
  const int64_t saved_width = n / kSketchDepth;
  if (n < 0 || n % kSketchDepth != 0 || saved_width < kNumShards || (saved_width & (saved_width - 1)) != 0) {
    *error = "admission sketch has " + std::to_string(n) + " counters: not " + std::to_string(kSketchDepth) +
             " rows of a power-of-two width";
    return false;
  }
  return true;
}

bool EmbeddingTable::ImportAdmission(const int32_t* counts, int64_t n, std::string* error) {
  if (n == 0) return true;  // saved without admission: nothing pending
  if (admission_size() == 0) return true;  // this table admits at once: sightings do not matter
  if (!AdmissionSizeFits(n, error)) return false;
  const int64_t saved_width = n / kSketchDepth;
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
