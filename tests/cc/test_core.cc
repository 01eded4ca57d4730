// Unit tests of kernels/core: RowArena, initializer, EmbeddingTable, UniqueWithCounts.
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "kernels/core/row_arena.h"
#include "kernels/core/embedding_table.h"
#include "kernels/core/gather.h"
#include "kernels/core/id_set.h"
#include "kernels/core/initializer.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/scatter_lines.h"
#include "kernels/core/unique.h"
#include "tests/cc/test_main.h"

using namespace tfps::core;

TEST(ArenaRecyclesFreedRowsAndKeepsIdsAcrossGrowth) {
  RowArena arena(6);
  std::vector<uint32_t> ids(5000);
  arena.Allocate(10, ids.data());
  for (uint32_t i = 0; i < 10; ++i) CHECK_EQ(ids[i], i);
  for (uint32_t i = 0; i < 10; ++i) arena.Row(ids[i])[5] = static_cast<float>(i);
  arena.Allocate(4990, ids.data() + 10);  // grows the mapping (it may move): ids keep their rows
  for (uint32_t i = 0; i < 10; ++i) CHECK(arena.Row(i)[5] == static_cast<float>(i));
  CHECK_EQ(arena.rows_in_use(), 5000);
  CHECK_EQ(arena.end(), 5000u);
  const int64_t reserved = arena.bytes_reserved();
  const int64_t page = sysconf(_SC_PAGESIZE);
  CHECK(reserved >= 5000 * 6 * 4 && reserved <= 5000 * 6 * 4 + page + 1024);  // touched pages, live bits
  arena.Free(7);
  arena.Free(3);
  CHECK(!arena.Live(7) && !arena.Live(3) && arena.Live(4));
  uint32_t again[3];
  arena.Allocate(3, again);  // the freed ids first (last freed first), then a new one
  CHECK_EQ(again[0], 3u);
  CHECK_EQ(again[1], 7u);
  CHECK_EQ(again[2], 5000u);
  CHECK(arena.Live(3) && arena.Live(7));
  CHECK_EQ(arena.rows_in_use(), 5001);
}

TEST(InitializerIsDeterministicAndShaped) {
  InitSpec spec;
  spec.kind = InitSpec::kTruncatedNormal;
  spec.a = 0.5f;
  spec.b = 2.0f;
  spec.seed = 7;
  float a[8], b[8];
  InitRow(spec, 42, 8, a);
  InitRow(spec, 42, 8, b);
  CHECK(std::memcmp(a, b, sizeof(a)) == 0);
  InitRow(spec, 43, 8, b);
  CHECK(std::memcmp(a, b, sizeof(a)) != 0);
  // Moments and the 2-stddev truncation over many keys.
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int k = 0; k < n; ++k) {
    InitRow(spec, k, 1, a);
    CHECK(a[0] >= 0.5f - 4.0f && a[0] <= 0.5f + 4.0f);
    sum += a[0];
    sq += (a[0] - 0.5) * (a[0] - 0.5);
  }
  CHECK(std::fabs(sum / n - 0.5) < 0.05);
  // Truncated at 2 sigma: stddev is 0.88 sigma.
  CHECK(std::fabs(std::sqrt(sq / n) - 0.88 * 2.0) < 0.05);
  spec.kind = InitSpec::kUniform;
  spec.a = -1.f;
  spec.b = 3.f;
  for (int k = 0; k < 1000; ++k) {
    InitRow(spec, k, 1, a);
    CHECK(a[0] >= -1.f && a[0] < 3.f);
  }
  InitSpec kind;
  CHECK(ParseInitKind("normal", &kind.kind) && kind.kind == InitSpec::kNormal);
  CHECK(!ParseInitKind("glorot", &kind.kind));
}

TEST(NormalQuantileInvertsTheCdf) {
  for (double p : {1e-300, 1e-12, 1e-4, 0.0227, 0.3, 0.5, 0.6, 0.975, 1 - 1e-9}) {
    const double z = NormalQuantile(p);
    const double back = 0.5 * std::erfc(-z / std::sqrt(2.0));
    CHECK(std::fabs(back - p) <= 1e-12 * p);
  }
  CHECK(NormalQuantile(0.5) == 0.0);
  CHECK(std::fabs(NormalQuantile(0.2) + NormalQuantile(0.8)) < 1e-15);
}

TEST(TableLookupInsertAssignRemove) {
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

TEST(TableGrowsAndRemovesManyKeys) {
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

TEST(ParallelBatchesKeepBatchOrderWithinAKey) {
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

TEST(ScatterLinesMatchesAPlainScatterForEveryRunShape) {
  // Runs of every start offset within a line and every length 0..17 (shorter than a line, one
  // line, spanning several; a line shared by up to all three runs and by two scatterers, as the
  // pieces of a batch are): the arrays equal a plain scatter's, and nothing outside the runs is
  // written.
  constexpr int kRuns = 3;
  for (int64_t start = 0; start < kPerLine; ++start) {
    for (int64_t len = 0; len <= 17; ++len) {
      const int64_t total = start + 2 * kRuns * len + kPerLine;
      LineAligned<int64_t> idx(total);
      LineAligned<uint64_t> h(total);
      std::vector<int64_t> want_idx(total, -1);
      std::vector<uint64_t> want_h(total, ~uint64_t{0});
      std::fill(idx.get(), idx.get() + total, -1);
      std::fill(h.get(), h.get() + total, ~uint64_t{0});
      // Two scatterers (pieces), each with kRuns runs; piece 1's run r right after piece 0's.
      int64_t next[2][kRuns];
      for (int r = 0; r < kRuns; ++r) {
        next[0][r] = start + 2 * r * len;
        next[1][r] = start + (2 * r + 1) * len;
      }
      int64_t plain[2][kRuns];
      std::memcpy(plain, next, sizeof(next));
      ScatterLines<kRuns> a(next[0], idx.get(), h.get()), b(next[1], idx.get(), h.get());
      int64_t i = 0;
      for (int64_t k = 0; k < len; ++k) {
        for (int r = 0; r < kRuns; ++r) {
          for (int piece = 0; piece < 2; ++piece, ++i) {
            (piece == 0 ? a : b).Put(r, i, static_cast<uint64_t>(i) * 7919u);
            const int64_t to = plain[piece][r]++;
            want_idx[to] = i;
            want_h[to] = static_cast<uint64_t>(i) * 7919u;
          }
        }
      }
      a.Flush();
      b.Flush();
      for (int64_t t = 0; t < total; ++t) CHECK(idx.get()[t] == want_idx[t] && h.get()[t] == want_h[t]);
    }
  }
}

TEST(LookupStreamsWholeLineRowsExactly) {
  // A lookup whose output outgrows the cache writes whole-line rows (dim 16, 48) with streaming
  // stores when the output is line-aligned, plain copies otherwise (dim 20, or misaligned).
  // Oracle: the same keys looked up in batches too small to stream. Present and missing keys
  // mixed, with and without insertion.
  for (const int64_t dim : {16, 48, 20}) {
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

TEST(TableSlotsUpdateExportImport) {
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
  t.Export(&snap);
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
  CHECK(u.Import(snap, &error));
  TableSnapshot again;
  u.Export(&again);
  std::map<int64_t, int> at2;
  for (size_t i = 0; i < again.keys.size(); ++i) at2[again.keys[i]] = static_cast<int>(i);
  for (int64_t k : keys) {
    CHECK(std::memcmp(&snap.values[2 * at[k]], &again.values[2 * at2[k]], 8) == 0);
    CHECK(std::memcmp(&snap.slots[2 * at[k]], &again.slots[2 * at2[k]], 8) == 0);
    CHECK(snap.freq[at[k]] == again.freq[at2[k]]);
  }
  EmbeddingTable wrong(3, spec);
  CHECK(!wrong.Import(snap, &error));
  snap.freq.pop_back();
  CHECK(!u.Import(snap, &error));
}

TEST(UniqueMatchesReference) {
  std::mt19937_64 rng(3);
  for (int64_t n : {0, 1, 7, 1000, 50000, 300000}) {
    std::vector<int64_t> ids(n);
    for (auto& x : ids) x = rng() % 7 == 0 ? LLONG_MIN + static_cast<int64_t>(rng() % 3)
                                             : static_cast<int64_t>(rng() % 5000) - 2500;
    std::vector<int32_t> inverse(n);
    std::vector<int64_t> uniq;
    std::vector<int32_t> counts;
    UniqueWithCounts(ids.data(), n, inverse.data(), &uniq, &counts);
    std::unordered_map<int64_t, int> ref;
    for (auto x : ids) ++ref[x];
    CHECK_EQ(uniq.size(), ref.size());
    for (size_t u = 0; u < uniq.size(); ++u) CHECK_EQ(counts[u], ref[uniq[u]]);
    for (int64_t i = 0; i < n; ++i) CHECK_EQ(uniq[inverse[i]], ids[i]);
    if (n < 16384) {  // small inputs: first-occurrence order
      std::set<int64_t> seen;
      size_t next = 0;
      for (auto x : ids) {
        if (seen.insert(x).second) CHECK_EQ(uniq[next++], x);
      }
    }
  }
}

TEST(IdSetRobinHoodGrowsFromALowEstimate) {
  IdSet set(4);  // far too small: must grow many times and keep every id
  std::mt19937_64 rng(5);
  std::vector<int64_t> ids;
  for (int i = 0; i < 100000; ++i) ids.push_back(static_cast<int64_t>(rng()));
  for (size_t i = 0; i < ids.size(); ++i) CHECK_EQ(set.Insert(ids[i]), static_cast<int32_t>(i));
  for (size_t i = 0; i < ids.size(); ++i) CHECK_EQ(set.Insert(ids[i]), static_cast<int32_t>(i));
  CHECK(set.capacity() * kIdSetMaxLoad >= 100000);
  for (size_t i = 0; i < ids.size(); ++i) CHECK_EQ(set.Find(ids[i], HashKey(ids[i])), static_cast<int32_t>(i));
  CHECK_EQ(set.Find(12345, HashKey(12345)), -1);
  CHECK_EQ(set.counts()[7], 2);
  CHECK(EstimateDistinct(ids.data(), 100000) > 50000);
  std::vector<int64_t> same(100000, 9);
  CHECK(EstimateDistinct(same.data(), 100000) < 200);
}

TEST(UniquePartitionGroupsByPartitionInFirstOccurrenceOrder) {
  std::mt19937_64 rng(7);
  for (int64_t n : {0, 1, 100, 70000, 300000}) {
    for (int64_t p : {1, 3, 16}) {
      for (auto strategy : {PartitionStrategy::kMod, PartitionStrategy::kHash}) {
        std::vector<int64_t> ids(n);
        for (auto& x : ids) x = static_cast<int64_t>(rng() % 3000) - 1500;
        std::vector<int32_t> inverse(n);
        std::vector<int64_t> uniq, offsets;
        std::vector<int32_t> counts;
        UniquePartition(ids.data(), n, p, strategy, inverse.data(), &uniq, &counts, &offsets);
        CHECK_EQ(static_cast<int64_t>(offsets.size()), p + 1);
        CHECK_EQ(offsets[p], static_cast<int64_t>(uniq.size()));
        for (int64_t i = 0; i < n; ++i) CHECK_EQ(uniq[inverse[i]], ids[i]);
        // Reference: per partition, ids in order of first occurrence.
        std::vector<std::vector<int64_t>> ref(p);
        std::set<int64_t> seen;
        for (auto x : ids) {
          if (seen.insert(x).second) ref[PartitionOf(x, p, strategy)].push_back(x);
        }
        for (int64_t q = 0; q < p; ++q) {
          CHECK(std::vector<int64_t>(uniq.begin() + offsets[q], uniq.begin() + offsets[q + 1]) == ref[q]);
        }
      }
    }
  }
  CHECK_EQ(PartitionOf(-1, 3, PartitionStrategy::kMod), 2);
  CHECK_EQ(PartitionOf(LLONG_MIN, 7, PartitionStrategy::kMod), ((LLONG_MIN % 7) + 7) % 7);
}

TEST(GatherRowsMatchesLoop) {
  for (int64_t dim : {16, 3}) {
    std::vector<float> params(100 * dim);
    for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);
    std::vector<int32_t> idx(50000);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>((i * 37) % 100);
    std::vector<float, std::allocator<float>> out(idx.size() * dim + 4);
    float* aligned = out.data();
    GatherRows(params.data(), dim, idx.data(), static_cast<int64_t>(idx.size()), aligned);
    for (size_t i = 0; i < idx.size(); ++i) {
      for (int64_t j = 0; j < dim; ++j) CHECK(aligned[i * dim + j] == params[idx[i] * dim + j]);
    }
    CHECK_EQ(CheckIndices(idx.data(), 50000, 100), -1);
    idx[77] = 100;
    CHECK_EQ(CheckIndices(idx.data(), 50000, 100), 77);
  }
}

TEST(ScatterAddRowsIsTheAdjointOfGather) {
  for (int64_t n : {10, 100000}) {
    const int64_t dim = 5, rows = 37;
    std::vector<float> data(n * dim);
    std::vector<int32_t> idx(n);
    for (int64_t i = 0; i < n; ++i) {
      idx[i] = static_cast<int32_t>((i * 7) % rows);
      for (int64_t j = 0; j < dim; ++j) data[i * dim + j] = static_cast<float>((i + j) % 3);
    }
    std::vector<float> out(rows * dim, 123.f), want(rows * dim, 0.f);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < dim; ++j) want[idx[i] * dim + j] += data[i * dim + j];
    }
    // Scratch filled with garbage: every buffer must be cleared before it is summed into.
    std::vector<float> scratch(ScatterAddScratch(n, rows, dim), -7.f);
    CHECK_EQ(scratch.empty(), n < kParallelThreshold);
    ScatterAddRows(data.data(), dim, idx.data(), n, rows, out.data(), scratch.data());
    CHECK(out == want);  // small integers: exact in any summation order
  }
}

TEST(EvictByRulesAndCapReturnsRowsToThePool) {
  EmbeddingTable t(2, InitSpec());
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 1000; ++k) keys.push_back(k * 31 - 500);
  std::vector<float> vals(keys.size() * 2, 1.f);
  t.Assign(keys.data(), keys.size(), vals.data());
  // Key i updated i % 10 times, the last time at step i.
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t u = 0; u < i % 10; ++u) t.Update(&keys[i], 1, static_cast<int64_t>(i), [](int64_t, float*, uint32_t) {});
  }
  const int64_t reserved = t.Stats().bytes_reserved;
  EvictPolicy freq;
  freq.min_freq = 3;  // drops i % 10 in {0, 1, 2}
  CHECK_EQ(t.Evict(freq, 1000), 300);
  EvictPolicy age;
  age.after_steps = 200;  // at step 1000: drops last_step < 800
  const int64_t old = t.Evict(age, 1000);
  CHECK_EQ(old, 560);  // i < 800 with i % 10 >= 3
  CHECK_EQ(t.size(), 140);
  EvictPolicy cap;
  cap.max_rows = 50;  // LFU: the 50 most updated survive
  CHECK_EQ(t.Evict(cap, 1000), 90);
  TableSnapshot snap;
  t.Export(&snap);
  for (int64_t f : snap.freq) CHECK(f >= 7);
  // Re-inserting after eviction reuses the freed rows: no new memory.
  t.Assign(keys.data(), keys.size(), vals.data());
  CHECK_EQ(t.size(), 1000);
  CHECK_EQ(t.Stats().bytes_reserved, reserved);
  EvictPolicy l2;
  l2.l2_below = 2.f;  // all values are (1, 1): norm 1.41
  CHECK_EQ(t.Evict(l2, 1000), 1000);
}

TEST(AdmissionCountsSightingsBeforeARow) {
  InitSpec spec;
  spec.kind = InitSpec::kConstant;
  spec.a = 0.25f;
  EmbeddingTable t(2, spec, /*admit_min_count=*/4);
  const int64_t keys[] = {11, 12};
  const int32_t counts[] = {3, 1};
  float out[4];
  CHECK_EQ(t.Lookup(keys, 2, true, false, out, counts), 0);
  CHECK(out[0] == 0.25f && out[3] == 0.25f);
  CHECK_EQ(t.size(), 0);
  CHECK_EQ(t.Stats().pending, 2);
  CHECK_EQ(t.Lookup(keys, 1, true, false, out), 1);  // fourth sighting of 11
  CHECK_EQ(t.size(), 1);
  CHECK_EQ(t.Stats().pending, 1);
  CHECK_EQ(t.Lookup(keys + 1, 1, false, true, out), 0);  // serving lookups do not count
  CHECK_EQ(t.Stats().pending, 1);
}
