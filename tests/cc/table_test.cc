// Unit tests of EmbeddingTable as a whole: lookup, insert, assign, remove, update, slots,
// export and import, against maps filled key by key.
#include <climits>
#include <cstring>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/table_snapshots.h"
#include "kernels/core/prefetch.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(Table, TableLookupInsertAssignRemove) {
  InitSpec spec;
  spec.kind = InitSpec::kNormal;
  spec.b = 1.f;
  EmbeddingTable t(3, spec);
  const int64_t keys[] = {0, -1, LLONG_MIN, LLONG_MAX, 5};
  float out[15], expect[3];
  CHECK_EQ(t.Lookup(keys, 5, /*insert=*/false, false, out), 0);
  CHECK_EQ(t.size(), 0);
  InitRow(spec, LLONG_MIN, 3, expect);
  CHECK(std::memcmp(out + 6, expect, sizeof(expect)) == 0);
  CHECK_EQ(t.Lookup(keys, 5, true, false, out), 5);
  CHECK_EQ(t.size(), 5);
  CHECK(std::memcmp(out + 6, expect, sizeof(expect)) == 0);
  CHECK_EQ(t.Lookup(keys, 5, true, false, out), 0);
  const float v[3] = {1, 2, 3};
  t.Assign(keys + 3, 1, v);
  t.Lookup(keys + 3, 1, false, false, out);
  CHECK(out[0] == 1 && out[1] == 2 && out[2] == 3);
  CHECK_EQ(t.Remove(keys, 2), 2);
  CHECK_EQ(t.Remove(keys, 2), 0);
  CHECK_EQ(t.size(), 3);
  t.Lookup(keys, 1, false, /*missing_zeros=*/true, out);
  CHECK(out[0] == 0 && out[1] == 0 && out[2] == 0);
}

TEST(Table, TableGrowsAndRemovesManyKeys) {
  EmbeddingTable t(2, InitSpec());
  std::vector<int64_t> keys;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 50000; ++i) keys.push_back(static_cast<int64_t>(rng()));
  std::vector<float> vals(keys.size() * 2);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
  t.Assign(keys.data(), keys.size(), vals.data());
  CHECK_EQ(t.size(), 50000);
  // Remove every other key, then all values of the rest must be intact.
  std::vector<int64_t> odd, even;
  for (size_t i = 0; i < keys.size(); ++i) (i % 2 ? odd : even).push_back(keys[i]);
  CHECK_EQ(t.Remove(odd.data(), odd.size()), 25000);
  std::vector<float> out(even.size() * 2);
  t.Lookup(even.data(), even.size(), false, true, out.data());
  for (size_t i = 0; i < even.size(); ++i) CHECK(out[2 * i] == static_cast<float>(4 * i));
  t.Lookup(odd.data(), odd.size(), false, true, out.data());
  for (size_t i = 0; i < odd.size(); ++i) CHECK(out[2 * i] == 0.f);
  // Freed rows are reused: re-inserting does not grow the pool.
  const int64_t reserved = t.Stats().bytes_reserved;
  t.Assign(odd.data(), odd.size(), vals.data());
  CHECK_EQ(t.Stats().bytes_reserved, reserved);
}

TEST(Table, ParallelBatchesKeepBatchOrderWithinAKey) {
  // A batch is sorted by shard: from kParallelSortMinKeys in pieces, one per thread, and from
  // kStreamMinBytes through line buffers. A key repeated across the pieces must still be seen
  // in batch order (the last assignment wins, updates apply in order) and every position must
  // read its key's row. Oracle: a map filled key by key in batch order. Sizes are not multiples
  // of a cache line of 8-byte values, so that the runs start and end inside lines.
  constexpr int64_t kDim = 4;
  for (const int64_t n : {kParallelThreshold + 3, kParallelSortMinKeys + 5, kStreamMinBytes / 16 + 5}) {
    EmbeddingTable t(kDim, InitSpec());
    std::mt19937_64 rng(static_cast<uint64_t>(n));
    std::vector<int64_t> keys(n);
    for (auto& k : keys) k = static_cast<int64_t>(rng() % (n / 3));  // each key about 3 times
    std::vector<float> vals(n * kDim);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
    t.Assign(keys.data(), n, vals.data());
    std::unordered_map<int64_t, int64_t> last;  // key -> last position
    for (int64_t i = 0; i < n; ++i) last[keys[i]] = i;
    CHECK_EQ(t.size(), static_cast<int64_t>(last.size()));
    std::vector<float> out(n * kDim);
    CHECK_EQ(t.Lookup(keys.data(), n, true, false, out.data()), 0);
    for (int64_t i = 0; i < n; ++i) {
      CHECK(std::memcmp(&out[i * kDim], &vals[last[keys[i]] * kDim], sizeof(float) * kDim) == 0);
    }
    // Updates see each key's occurrences in batch order: row = row * 2 + position.
    std::unordered_map<int64_t, float> expect;
    for (const auto& [key, i] : last) expect[key] = vals[i * kDim];
    for (int64_t i = 0; i < n; ++i) expect[keys[i]] = expect[keys[i]] * 0.5f + static_cast<float>(i);
    t.Update(keys.data(), n, 1, [&](int64_t i, float* row, uint32_t) { row[0] = row[0] * 0.5f + static_cast<float>(i); });
    t.Lookup(keys.data(), n, false, false, out.data());
    for (int64_t i = 0; i < n; ++i) CHECK(out[i * kDim] == expect[keys[i]]);
  }
}

TEST(Table, LookupStreamsWholeLineRowsExactly) {
  // A lookup whose output outgrows the cache writes whole-line rows (dim 16, 48) with streaming
  // stores when the output is line-aligned, plain copies otherwise (dim 20, or misaligned).
  // Oracle: the same keys looked up in batches too small to stream. Present and missing keys
  // mixed, with and without insertion. (Under TSan, whose concern is the parallel path each dim
  // takes alike, one streamed dim and the copied one.)
  const std::vector<int64_t> dims = tfps_test::kUnderTsan ? std::vector<int64_t>{16, 20}
                                                          : std::vector<int64_t>{16, 48, 20};
  for (const int64_t dim : dims) {
    for (const int64_t misalign : {0, 1}) {
      InitSpec spec;
      spec.kind = InitSpec::kNormal;
      spec.b = 1.f;
      EmbeddingTable t(dim, spec);
      const int64_t n = kStreamMinBytes / (4 * dim) + 7;
      std::mt19937_64 rng(static_cast<uint64_t>(dim + misalign));
      std::vector<int64_t> keys(n), present;
      for (auto& k : keys) k = static_cast<int64_t>(rng() % (2 * n));
      for (int64_t i = 0; i < n; i += 2) present.push_back(keys[i]);
      std::vector<float> vals(present.size() * dim);
      for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i % 1000) * 0.5f;
      t.Assign(present.data(), static_cast<int64_t>(present.size()), vals.data());
      for (const bool insert : {false, true}) {
        std::vector<float> want(n * dim);
        EmbeddingTable copy(dim, spec);
        copy.Assign(present.data(), static_cast<int64_t>(present.size()), vals.data());
        for (int64_t i = 0; i < n; i += 1000) {
          copy.Lookup(keys.data() + i, std::min<int64_t>(1000, n - i), insert, false, want.data() + i * dim);
        }
        std::vector<float> buffer(n * dim + kCacheLine);
        float* out = buffer.data() + ((kCacheLine - reinterpret_cast<uintptr_t>(buffer.data()) % kCacheLine) %
                                      kCacheLine) / sizeof(float) + misalign;
        EmbeddingTable fresh(dim, spec);
        fresh.Assign(present.data(), static_cast<int64_t>(present.size()), vals.data());
        fresh.Lookup(keys.data(), n, insert, false, out);
        CHECK(std::memcmp(out, want.data(), sizeof(float) * n * dim) == 0);
        CHECK_EQ(fresh.size(), copy.size());
      }
    }
  }
}

TEST(Table, TableSlotsUpdateExportImport) {
  InitSpec spec;
  spec.kind = InitSpec::kConstant;
  spec.a = 0.5f;
  EmbeddingTable t(2, spec);
  const int64_t keys[] = {10, 20, 30};
  float out[6];
  t.Lookup(keys, 3, true, false, out);
  const float init = 0.1f;
  std::string error;
  CHECK(t.EnsureSlots(1, &init, &error));
  CHECK(!t.EnsureSlots(2, &init, &error));
  CHECK(!error.empty());
  CHECK_EQ(t.Update(keys, 2, 9, [](int64_t i, float* row, uint32_t) {
    row[0] += 1.f + i;
    row[2] += 1.f;  // slot 0
  }), 2);
  const int64_t missing = 99;
  CHECK_EQ(t.Update(&missing, 1, 9, [](int64_t, float*, uint32_t) {}), 0);
  TableSnapshot snap;
  TableSnapshots(t).Export(&snap);
  CHECK_EQ(snap.keys.size(), 3u);
  CHECK_EQ(snap.num_slots, 1);
  std::map<int64_t, int> at;
  for (size_t i = 0; i < snap.keys.size(); ++i) at[snap.keys[i]] = static_cast<int>(i);
  CHECK(snap.values[2 * at[10]] == 1.5f && snap.values[2 * at[20]] == 2.5f && snap.values[2 * at[30]] == 0.5f);
  CHECK(snap.slots[2 * at[10]] == 1.1f && snap.slots[2 * at[30]] == 0.1f);
  // freq counts updates (key 10 and 20 once, 30 never); lookups do not write rows.
  CHECK(snap.freq[at[10]] == 1 && snap.freq[at[30]] == 0 && snap.last_step[at[10]] == 9 &&
        snap.last_step[at[30]] == 0);
  EmbeddingTable u(2, spec);
  CHECK(TableSnapshots(u).Import(snap, &error));
  TableSnapshot again;
  TableSnapshots(u).Export(&again);
  std::map<int64_t, int> at2;
  for (size_t i = 0; i < again.keys.size(); ++i) at2[again.keys[i]] = static_cast<int>(i);
  for (int64_t k : keys) {
    CHECK(std::memcmp(&snap.values[2 * at[k]], &again.values[2 * at2[k]], 8) == 0);
    CHECK(std::memcmp(&snap.slots[2 * at[k]], &again.slots[2 * at2[k]], 8) == 0);
    CHECK(snap.freq[at[k]] == again.freq[at2[k]]);
  }
  EmbeddingTable wrong(3, spec);
  CHECK(!TableSnapshots(wrong).Import(snap, &error));
  snap.freq.pop_back();
  CHECK(!TableSnapshots(u).Import(snap, &error));
}
