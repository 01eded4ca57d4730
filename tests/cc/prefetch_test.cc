// Prefetching (config.h: PrefetchMode) changes when memory is fetched, never what a batch path
// computes: every path gives bit-identical results in every mode, through index growth, slot
// re-layout, removal and eviction; and in a table larger than the last-level cache, threads
// that remove and re-insert keys while others read and update read exactly what a model says.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/table_snapshots.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

// Every output of a fixed sequence of batch operations, as raw bytes.
std::vector<unsigned char> Transcript(PrefetchMode mode) {
  InitSpec spec;
  spec.kind = InitSpec::kNormal;
  spec.b = 1.f;
  spec.seed = 7;
  EmbeddingTable t(8, spec);
  t.SetPrefetch(mode, 0);  // this table's shards are small: prefetch them all the same
  std::vector<unsigned char> out;
  auto record = [&](const void* p, size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    out.insert(out.end(), c, c + bytes);
  };
  constexpr int64_t kBatch = kParallelThreshold + 3000;  // the parallel path
  std::vector<float> values(kBatch * 8), grads(kBatch * 8);
  for (int r = 0; r < (tfps_test::kUnderTsan ? 3 : 8); ++r) {
    // Half the keys of a batch are new (the index grows), half were seen the round before.
    std::vector<int64_t> keys(kBatch);
    for (int64_t k = 0; k < kBatch; ++k) keys[k] = (k % 2 ? r : r - 1) * 1000003LL + k * 7919;
    const int64_t inserted = t.Lookup(keys.data(), kBatch, true, false, values.data());
    record(&inserted, sizeof(inserted));
    record(values.data(), values.size() * sizeof(float));
    for (int64_t i = 0; i < kBatch * 8; ++i) grads[i] = static_cast<float>((i * 37 + r) % 101) * 0.01f;
    const int64_t updated = t.Update(keys.data(), kBatch, 100 + r, [&](int64_t i, float* row, uint32_t n) {
      for (int64_t j = 0; j < 8; ++j) row[j] -= 0.1f * grads[i * 8 + j] / (1.f + static_cast<float>(n));
    });
    record(&updated, sizeof(updated));
    if (r == 2) {
      const float init = 0.5f;
      std::string error;
      CHECK(t.EnsureSlots(1, &init, &error));  // every row re-laid out
    }
    // Overwrite a third of the keys, remove a fifth (some twice in the batch, some absent).
    std::vector<int64_t> assign(keys.begin(), keys.begin() + kBatch / 3);
    t.Assign(assign.data(), static_cast<int64_t>(assign.size()), grads.data());
    std::vector<int64_t> remove;
    for (int64_t k = 0; k < kBatch; k += 5) remove.push_back(keys[k] + (k % 3 == 0 ? 1 : 0));
    remove.push_back(remove.front());
    const int64_t removed = t.Remove(remove.data(), static_cast<int64_t>(remove.size()));
    record(&removed, sizeof(removed));
    t.Lookup(keys.data(), kBatch, false, true, values.data());  // serving path: no insert
    record(values.data(), values.size() * sizeof(float));
    if (r == 5) {
      RareRows policy(2);
      const int64_t evicted = t.Evict({&policy}, 106);
      record(&evicted, sizeof(evicted));
    }
  }
  TableSnapshot snap;
  TableSnapshots(t).Export(&snap);
  // Export walks each shard's rows in id order; the same operations give the same order.
  record(snap.keys.data(), snap.keys.size() * sizeof(int64_t));
  record(snap.values.data(), snap.values.size() * sizeof(float));
  record(snap.slots.data(), snap.slots.size() * sizeof(float));
  record(snap.freq.data(), snap.freq.size() * sizeof(int64_t));
  record(snap.last_step.data(), snap.last_step.size() * sizeof(int64_t));
  return out;
}

}  // namespace

TEST(Prefetch, PrefetchModesGiveIdenticalResultsOnEveryBatchPath) {
  const std::vector<unsigned char> off = Transcript(PrefetchMode::kOff);
  CHECK(off.size() > (tfps_test::kUnderTsan ? 300000u : 1000000u));
  CHECK(Transcript(PrefetchMode::kGroup) == off);
  CHECK(Transcript(PrefetchMode::kRolling) == off);
}

TEST(Prefetch, PrefetchModeIsEachTablesOwn) {
  InitSpec spec;
  EmbeddingTable a(4, spec), b(4, spec);
  CHECK(a.SetPrefetch(PrefetchMode::kOff) == PrefetchMode::kRolling);
  CHECK(b.SetPrefetch(PrefetchMode::kGroup) == PrefetchMode::kRolling);  // a's switch left b alone
  CHECK(a.SetPrefetch(PrefetchMode::kRolling) == PrefetchMode::kOff);
}

TEST(Prefetch, PrefetchedPathsStayExactWhileOtherThreadsRemoveInATableLargerThanTheCache) {
  // 2^21 rows of dim 32 (144 bytes each, with the index about 310 MB): past this machine's
  // last-level cache, so prefetched rows really come from memory while others are freed.
  // Under ThreadSanitizer (races, which do not depend on the size; 10x slower) 2^17 rows.
#if defined(__SANITIZE_THREAD__)
  constexpr int64_t kStable = int64_t{1} << 17;
#else
  constexpr int64_t kStable = int64_t{1} << 21;
#endif
  constexpr int64_t kDim = 32, kChurn = kParallelThreshold + 5000;
  InitSpec spec;
  spec.kind = InitSpec::kZeros;
  EmbeddingTable t(kDim, spec);
  auto stable_key = [](int64_t k) { return k * 2654435761LL + 11; };
  auto value_of = [](int64_t key) { return static_cast<float>(key % 9973); };
  {
    constexpr int64_t kChunk = int64_t{1} << 17;
    std::vector<int64_t> keys(kChunk);
    std::vector<float> rows(kChunk * kDim);
    for (int64_t begin = 0; begin < kStable; begin += kChunk) {
      for (int64_t k = 0; k < kChunk; ++k) {
        keys[k] = stable_key(begin + k);
        std::fill(rows.begin() + k * kDim, rows.begin() + (k + 1) * kDim, value_of(keys[k]));
      }
      t.Assign(keys.data(), kChunk, rows.data());
    }
  }
  CHECK_EQ(t.size(), kStable);
  for (PrefetchMode mode : {PrefetchMode::kRolling, PrefetchMode::kGroup, PrefetchMode::kOff}) {
    t.SetPrefetch(mode, 0);  // the TSan size stays under the threshold: prefetch it anyway
    std::atomic<bool> bad{false};
    std::atomic<int> readers_done{0};
    // Churners insert, assign and remove keys of their own, between the stable keys in the same
    // shards, while readers look up and update random stable keys (never removed).
    auto churner = [&](int w) {
      std::vector<int64_t> keys(kChurn);
      std::vector<float> rows(kChurn * kDim, -1.f), out(kChurn * kDim);
      for (int r = 0; readers_done.load() < 2; ++r) {
        for (int64_t k = 0; k < kChurn; ++k) keys[k] = -((r * 2 + w) * kChurn + k) - 1;
        t.Lookup(keys.data(), kChurn, true, false, out.data());
        t.Assign(keys.data(), kChurn, rows.data());
        if (t.Remove(keys.data(), kChurn) != kChurn) bad = true;
      }
    };
    auto reader = [&](int w) {
      std::vector<int64_t> keys(kChurn);
      std::vector<float> out(kChurn * kDim);
      uint64_t x = 88172645463325252ULL + w;
      for (int r = 0; r < (tfps_test::kUnderTsan ? 2 : 6); ++r) {
        for (int64_t k = 0; k < kChurn; ++k) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          keys[k] = stable_key(static_cast<int64_t>(x % kStable));
        }
        t.Lookup(keys.data(), kChurn, true, false, out.data());
        for (int64_t k = 0; k < kChurn; ++k) {
          if (out[k * kDim] != value_of(keys[k]) || out[(k + 1) * kDim - 1] != value_of(keys[k])) bad = true;
        }
        // An update that leaves the value as it was, so the model stays one number per key.
        const int64_t updated = t.Update(keys.data(), kChurn, r, [&](int64_t, float* row, uint32_t) {
          for (int64_t j = 0; j < kDim; ++j) row[j] = row[j] * 2.f - row[j];
        });
        if (updated != kChurn) bad = true;
      }
      ++readers_done;
    };
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) threads.emplace_back(churner, w);
    for (int w = 0; w < 2; ++w) threads.emplace_back(reader, w);
    for (auto& th : threads) th.join();
    CHECK(!bad.load());
    CHECK_EQ(t.size(), kStable);
  }
}
