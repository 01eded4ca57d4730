#include "kernels/core/embedding_table.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include <immintrin.h>

#include "kernels/core/hash.h"
#include "kernels/core/parallel.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/scatter_lines.h"

namespace tfps {
namespace core {

EmbeddingTable::EmbeddingTable(int64_t dim, const InitSpec& init, uint32_t admit_min_count, int64_t sketch_width)
    : dim_(dim),
      init_(init),
      admit_min_count_(admit_min_count < 1 ? 1 : admit_min_count),
      sketch_width_(sketch_width),
      shards_(new Shard[kNumShards]) {
  if (sketch_width < kMinSketchWidth || (sketch_width & (sketch_width - 1)) != 0) {
    throw std::invalid_argument("EmbeddingTable: sketch_width must be a power of two >= kMinSketchWidth");
  }
  for (int i = 0; i < kNumShards; ++i) {
    shards_[i].rows = NewArena(0);
    if (admit_min_count_ > 1) shards_[i].sketch = AdmissionSketch(sketch_width_ / kNumShards, admit_min_count_);
  }
}

EmbeddingTable::~EmbeddingTable() = default;

int EmbeddingTable::num_slots() const {
  ReadLock lock(shards_[0].mu, /*write=*/false);
  return num_slots_;
}

int64_t EmbeddingTable::size() const {
  int64_t n = 0;
  for (int i = 0; i < kNumShards; ++i) {
    ReadLock lock(shards_[i].mu, false);
    n += shards_[i].index.size();
  }
  return n;
}

PrefetchMode EmbeddingTable::PrefetchModeOf(const Shard& s) const {
  const int64_t bytes = static_cast<int64_t>(s.rows->end()) * s.rows->stride() * static_cast<int64_t>(sizeof(float));
  return bytes < prefetch_min_shard_bytes_.load(std::memory_order_relaxed)
             ? PrefetchMode::kOff
             : static_cast<PrefetchMode>(prefetch_mode_.load(std::memory_order_relaxed));
}

PrefetchMode EmbeddingTable::SetPrefetch(PrefetchMode mode, int64_t min_shard_bytes) {
  prefetch_min_shard_bytes_.store(min_shard_bytes, std::memory_order_relaxed);
  return static_cast<PrefetchMode>(prefetch_mode_.exchange(static_cast<int>(mode), std::memory_order_relaxed));
}

template <typename Visit>
void EmbeddingTable::Prefetched(const Shard& s, const int64_t* idx, const uint64_t* h,
                                int64_t m, size_t row_bytes, const void* batch, size_t batch_bytes,
                                const Visit& visit) const {
  auto slot_of = [&](int64_t j) { s.index.PrefetchHome(h[j]); };
  auto row_of = [&](int64_t j) {
    const int64_t pos = s.index.Candidate(h[j]);
    if (pos >= 0) PrefetchLines(s.rows->Row(s.index.IdAt(pos)), row_bytes);
    if (batch != nullptr) PrefetchLines(static_cast<const char*>(batch) + idx[j] * batch_bytes, batch_bytes);
  };
  constexpr int64_t d = kPrefetchDistance;
  switch (PrefetchModeOf(s)) {
    case PrefetchMode::kOff:
      for (int64_t j = 0; j < m; ++j) visit(j);
      return;
    case PrefetchMode::kGroup:
      for (int64_t begin = 0; begin < m; begin += 2 * d) {
        const int64_t end = std::min(m, begin + 2 * d);
        for (int64_t j = begin; j < end; ++j) slot_of(j);
        for (int64_t j = begin; j < end; ++j) row_of(j);
        for (int64_t j = begin; j < end; ++j) visit(j);
      }
      return;
    case PrefetchMode::kRolling:
      for (int64_t j = 0; j < std::min(m, 2 * d); ++j) slot_of(j);
      for (int64_t j = 0; j < std::min(m, d); ++j) row_of(j);
      for (int64_t j = 0; j < m; ++j) {
        if (j + 2 * d < m) slot_of(j + 2 * d);
        if (j + d < m) row_of(j + d);
        visit(j);
      }
      return;
  }
}

void EmbeddingTable::ReserveLocked(Shard* s, int64_t more) {
  // Rebuilt from the rows in memory order (no random row reads); ids are unchanged.
  s->index.Reserve(more, [s](const auto& place) {
    ForEachRow(*s, [&](uint32_t id, const float* value) { place(HashKey(KeyOfRow(value - kKeyFloats)), id); });
  });
}

void EmbeddingTable::EraseLocked(Shard* s, int64_t pos) {
  const uint32_t freed = s->index.EraseAt(pos, HashOf(*s));
  s->rows->Free(freed);  // after the shifts, which read other rows' keys only
}

void EmbeddingTable::RemoveLocked(Shard* s, int64_t key, int64_t pos) const {
  if (removal_.on()) s->removed.Log(key, removal_.stamp());
  EraseLocked(s, pos);
}

void EmbeddingTable::InitNewRow(int64_t key, float* row) const {
  InitRow(init_, key, dim_, row);
  InitSlotsAndMeta(row);
}

void EmbeddingTable::InitSlotsAndMeta(float* row) const {
  for (int j = 0; j < num_slots_; ++j) {
    std::fill(row + dim_ * (1 + j), row + dim_ * (2 + j), slot_init_[j]);
  }
  uint32_t* meta = Meta(row);
  meta[0] = 0;
  meta[1] = 0;
}

template <typename Init, typename Use>
int64_t EmbeddingTable::InsertRowsLocked(Shard* s, const int64_t* keys, const int64_t* idx, const uint64_t* h,
                                         const std::vector<int64_t>& missing, const Init& init, const Use& use) {
  // Room in the index and rows from the arena first: either may throw std::bad_alloc, and then
  // nothing has changed. After that nothing allocates.
  ReserveLocked(s, static_cast<int64_t>(missing.size()));
  std::vector<uint32_t> fresh(missing.size());
  s->rows->Allocate(static_cast<int64_t>(fresh.size()), fresh.data());
  size_t used = 0;
  const bool ahead = PrefetchModeOf(*s) != PrefetchMode::kOff;
  const auto key_of = KeyOf(*s);
  for (size_t t = 0; t < missing.size(); ++t) {
    if (ahead && t + kPrefetchDistance < missing.size()) s->index.PrefetchHome(h[missing[t + kPrefetchDistance]]);
    const int64_t j = missing[t];
    const int64_t key = keys[idx[j]];
    // One probe finds the key (repeated in the batch, so in by now) or the empty slot for it.
    const int64_t pos = s->index.FindOrEmpty(h[j], key, key_of);
    float* row;
    if (s->index.EmptyAt(pos)) {
      const uint32_t id = fresh[used++];
      std::memcpy(s->rows->Row(id), &key, sizeof(key));
      row = s->rows->Row(id) + kKeyFloats;
      init(j, row);
      s->index.FillAt(pos, h[j], id);
    } else {
      row = ValueAt(*s, pos);
    }
    use(j, row);
  }
  for (size_t k = used; k < fresh.size(); ++k) s->rows->Free(fresh[k]);
  return static_cast<int64_t>(used);
}

void EmbeddingTable::WriteMeta(uint32_t* meta, int64_t freq, int64_t last_step) {
  meta[0] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(freq, UINT32_MAX)));
  meta[1] = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(last_step, UINT32_MAX)));
}

void EmbeddingTable::ForEachShard(
    const int64_t* keys, int64_t n,
    const std::function<void(Shard&, const int64_t* idx, const uint64_t* h, int64_t m)>& fn) const {
  if (n == 0) return;
  const ShardOrder order(keys, n);
  auto run = [&](int s) {
    if (order.count(s) > 0) fn(shards_[s], order.idx(s), order.hashes(s), order.count(s));
  };
  if (n < kParallelThreshold) {
    for (int s = 0; s < kNumShards; ++s) run(s);
  } else {
    ParallelTasks(kNumShards, run);
  }
}

int64_t EmbeddingTable::Lookup(const int64_t* keys, int64_t n, bool insert,
                               bool missing_zeros, float* out, const int32_t* counts) {
  std::atomic<int64_t> inserted{0};
  const size_t row_bytes = sizeof(float) * dim_;
  // Rows that are whole cache lines go out with streaming stores when the output outgrows the
  // cache (kStreamMinBytes): the shard order writes it out of order, and a store that fills a
  // line need not read it first (10^7 keys, dim 16: 1.07x the lookups per second).
  const bool stream = row_bytes % kCacheLine == 0 && reinterpret_cast<uintptr_t>(out) % kCacheLine == 0 &&
                      n * static_cast<int64_t>(row_bytes) >= kStreamMinBytes;
  ForEachShard(keys, n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    std::vector<int64_t> missing;
    {
      ReadLock lock(s.mu, false);
      Prefetched(s, idx, h, m, sizeof(int64_t) + row_bytes, stream ? nullptr : out, row_bytes, [&](int64_t j) {
        const int64_t i = idx[j];
        const int64_t pos = Find(s, h[j], keys[i]);
        if (pos < 0) {
          missing.push_back(j);
          return;
        }
        if (stream) StoreRowOnce(out + i * dim_, ValueAt(s, pos), dim_);
        else std::memcpy(out + i * dim_, ValueAt(s, pos), row_bytes);
      });
      if (stream) _mm_sfence();
    }
    if (missing.empty()) return;
    auto fill_missing = [&](int64_t j) {
      float* dst = out + idx[j] * dim_;
      if (missing_zeros) std::fill(dst, dst + dim_, 0.f);
      else InitRow(init_, keys[idx[j]], dim_, dst);
    };
    if (!insert) {
      for (int64_t j : missing) fill_missing(j);
      return;
    }
    ReadLock lock(s.mu, true);
    if (admit_min_count_ > 1) {
      // Admission: count sightings; keys below the threshold read as missing, get no row.
      std::vector<int64_t> admitted;
      for (int64_t j : missing) {
        const int64_t i = idx[j];
        if (Find(s, h[j], keys[i]) >= 0) {
          admitted.push_back(j);  // another batch admitted it meanwhile
          continue;
        }
        const uint32_t count = counts ? static_cast<uint32_t>(std::max<int32_t>(counts[i], 1)) : 1u;
        if (s.sketch.Admit(h[j], count)) admitted.push_back(j);
        else fill_missing(j);
      }
      s.sketch.ClampPending();
      missing.swap(admitted);
    }
    // Another batch may have added some of them meanwhile: InsertRowsLocked looks again.
    inserted += InsertRowsLocked(
        &s, keys, idx, h, missing, [&](int64_t j, float* row) { InitNewRow(keys[idx[j]], row); },
        [&](int64_t j, float* row) { std::memcpy(out + idx[j] * dim_, row, row_bytes); });
  });
  return inserted.load();
}

void EmbeddingTable::Assign(const int64_t* keys, int64_t n, const float* values) {
  const size_t row_bytes = sizeof(float) * dim_;
  ForEachShard(keys, n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    ReadLock lock(s.mu, true);
    std::vector<int64_t> missing;
    Prefetched(s, idx, h, m, sizeof(int64_t) + row_bytes, values, row_bytes, [&](int64_t j) {
      const int64_t i = idx[j];
      const int64_t pos = Find(s, h[j], keys[i]);
      if (pos >= 0) {
        std::memcpy(ValueAt(s, pos), values + i * dim_, row_bytes);
      } else {
        missing.push_back(j);
      }
    });
    if (missing.empty()) return;
    InsertRowsLocked(
        &s, keys, idx, h, missing, [&](int64_t, float* row) { InitSlotsAndMeta(row); },
        [&](int64_t j, float* row) { std::memcpy(row, values + idx[j] * dim_, row_bytes); });
  });
}

int64_t EmbeddingTable::Remove(const int64_t* keys, int64_t n) {
  std::atomic<int64_t> removed{0};
  ForEachShard(keys, n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    ReadLock lock(s.mu, true);
    int64_t local = 0;
    // Removing reads the key and writes the free list into the row's first bytes.
    Prefetched(s, idx, h, m, sizeof(int64_t), nullptr, 0, [&](int64_t j) {
      const int64_t pos = Find(s, h[j], keys[idx[j]]);
      if (pos < 0) return;
      RemoveLocked(&s, keys[idx[j]], pos);
      ++local;
    });
    removed += local;
  });
  return removed.load();
}

int64_t EmbeddingTable::Update(const int64_t* keys, int64_t n, int64_t step,
                               const std::function<void(int64_t, float*, uint32_t)>& fn, const void* batch,
                               size_t batch_bytes) {
  std::atomic<int64_t> updated{0};
  removal_.NoteStep(step);
  const uint32_t step32 = static_cast<uint32_t>(std::max<int64_t>(0, std::min<int64_t>(step, UINT32_MAX)));
  ForEachShard(keys, n, [&](Shard& s, const int64_t* idx, const uint64_t* h, int64_t m) {
    ReadLock lock(s.mu, true);
    const size_t stride_bytes = sizeof(float) * stride_floats();  // the layout is fixed while a shard is locked
    int64_t local = 0;
    Prefetched(s, idx, h, m, stride_bytes, batch, batch_bytes, [&](int64_t j) {
      const int64_t pos = Find(s, h[j], keys[idx[j]]);
      if (pos < 0) return;
      float* row = ValueAt(s, pos);
      uint32_t* meta = Meta(row);
      fn(idx[j], row, meta[0]);
      if (meta[0] != UINT32_MAX) ++meta[0];
      meta[1] = step32;
      ++local;
    });
    updated += local;
  });
  return updated.load();
}

void EmbeddingTable::LockAll() const {
  for (int i = 0; i < kNumShards; ++i) shards_[i].mu.lock();
}

void EmbeddingTable::UnlockAll() const {
  for (int i = kNumShards - 1; i >= 0; --i) shards_[i].mu.unlock();
}

TableStats EmbeddingTable::Stats() const {
  TableStats st;
  int64_t index_bytes = 0;
  AllShardsLock lock(*this);
  for (int i = 0; i < kNumShards; ++i) {
    st.rows += shards_[i].index.size();
    index_bytes += shards_[i].index.bytes();
  }
  st.row_bytes = stride_floats() * static_cast<int64_t>(sizeof(float));
  int64_t arena_bytes = 0;
  int64_t side_reserved = 0, side_in_use = 0;  // admission sketch and removed-keys log
  for (int i = 0; i < kNumShards; ++i) {
    const Shard& s = shards_[i];
    st.pending += s.sketch.pending();
    arena_bytes += s.rows->bytes_reserved();
    st.removed_logged += s.removed.size();
    side_reserved += s.sketch.bytes_reserved() + s.removed.bytes_reserved();
    side_in_use += s.sketch.bytes_in_use() + s.removed.bytes_in_use();
  }
  st.bytes_reserved = arena_bytes + index_bytes + side_reserved;
  st.index_bytes = index_bytes;
  st.arena_bytes = arena_bytes;
  st.side_bytes = side_reserved;
  st.bytes_in_use = st.rows * st.row_bytes + index_bytes + side_in_use;
  return st;
}

}  // namespace core
}  // namespace tfps
