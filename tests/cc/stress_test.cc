// Four threads mix every table operation that can run at once -- lookup-insert, assign,
// update (sparse apply), remove, evict, export, delta export, stats and the first slot
// creation -- with batches above kParallelThreshold, so the parallel paths run; the contents
// are checked against a model during and after the run.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/table_snapshots.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

constexpr int kThreads = 4;
constexpr int64_t kDim = 4;
constexpr int64_t kOwned = kParallelThreshold + 2000;  // keys per thread, above the threshold
constexpr int64_t kChurn = kParallelThreshold + 1000;
constexpr int kRounds = tfps_test::kUnderTsan ? 4 : 12;
constexpr float kStart = 10.f;  // owned rows start at 10 (norm 20), churn rows at 0

int64_t OwnedKey(int t, int64_t k) { return (k * kThreads + t) * 7919LL - 100000; }
int64_t ChurnKey(int t, int r, int64_t k) { return (int64_t{1} << 50) + ((t * kRounds + r) * kChurn + k) * 13; }

// Every row of a snapshot taken at any moment: an owned row holds kStart + u in every value
// and u in its slot (u updates so far, = freq); a churn row was never updated: 0 and 0.
bool SnapshotConsistent(const TableSnapshot& snap) {
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  if (static_cast<int64_t>(snap.values.size()) != n * kDim ||
      static_cast<int64_t>(snap.slots.size()) != n * kDim * snap.num_slots) {
    return false;
  }
  for (int64_t i = 0; i < n; ++i) {
    const bool churn = snap.keys[i] >= (int64_t{1} << 50);
    const float u = static_cast<float>(snap.freq[i]);
    for (int64_t j = 0; j < kDim; ++j) {
      const float v = snap.values[i * kDim + j];
      if (v != (churn ? 0.f : kStart + u)) return false;
      if (snap.num_slots == 1 && snap.slots[i * kDim + j] != (churn ? 0.f : u)) return false;
    }
  }
  return true;
}

}  // namespace

TEST(Stress, StressFourThreadsMixEveryOperationOnTheParallelPath) {
  InitSpec spec;
  spec.kind = InitSpec::kConstant;
  spec.a = 0.f;
  EmbeddingTable t(kDim, spec);
  t.SetTrackRemoved(true);
  std::atomic<bool> bad{false};
  std::atomic<int64_t> evicted{0};
  auto worker = [&](int w) {
    std::vector<int64_t> mine(kOwned);
    for (int64_t k = 0; k < kOwned; ++k) mine[k] = OwnedKey(w, k);
    std::vector<float> start(kOwned * kDim, kStart), out(kOwned * kDim);
    t.Assign(mine.data(), kOwned, start.data());
    const float zero = 0.f;
    std::string error;
    for (int r = 0; r < kRounds; ++r) {
      // The first EnsureSlots of the run re-lays out every row while the others read.
      if (!t.EnsureSlots(1, &zero, &error)) bad = true;
      t.Lookup(mine.data(), kOwned, true, false, out.data());
      for (int64_t i = 0; i < kOwned * kDim; i += kDim) {
        if (out[i] != kStart + r) bad = true;  // r updates so far, by this thread only
      }
      const int64_t updated = t.Update(mine.data(), kOwned, 1000 + r, [&](int64_t, float* row, uint32_t) {
        for (int64_t j = 0; j < 2 * kDim; ++j) row[j] += 1.f;
      });
      if (updated != kOwned) bad = true;
      std::vector<int64_t> churn(kChurn);
      for (int64_t k = 0; k < kChurn; ++k) churn[k] = ChurnKey(w, r, k);
      std::vector<float> tmp(kChurn * kDim);
      t.Lookup(churn.data(), kChurn, true, false, tmp.data());
      if (w % 2 == 0) {
        if (t.Remove(churn.data(), kChurn) > kChurn) bad = true;
      } else {
        SmallRows small(1.f);  // churn rows are 0 (norm 0), owned rows >= 10 in every value
        evicted += t.Evict({&small}, 1000 + r);
      }
      TableSnapshot snap;
      if (w == 0) {
        std::vector<int64_t> removed;
        bool complete = false;
        TableSnapshots(t).ExportDelta(1000, &snap, &removed, &complete);
      } else {
        TableSnapshots(t).Export(&snap);
      }
      if (!SnapshotConsistent(snap)) bad = true;
      const TableStats st = t.Stats();
      if (st.bytes_in_use > st.bytes_reserved || st.rows < 0) bad = true;
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) threads.emplace_back(worker, w);
  for (auto& th : threads) th.join();
  CHECK(!bad.load());
  CHECK(evicted.load() > 0);
  // Left: every owned row, and none of the churn rows but those a remove raced with eviction for.
  SmallRows small(1.f);
  t.Evict({&small}, 0);
  CHECK_EQ(t.size(), kThreads * kOwned);
  TableSnapshot snap;
  TableSnapshots(t).Export(&snap);
  CHECK(SnapshotConsistent(snap));
  CHECK_EQ(snap.num_slots, 1);
  for (size_t i = 0; i < snap.keys.size(); ++i) {
    CHECK_EQ(snap.freq[i], kRounds);
    CHECK_EQ(snap.last_step[i], 1000 + kRounds - 1);
  }
  CHECK_EQ(t.Stats().rows, kThreads * kOwned);
}

// Called from one thread: the bound takes 64 * 2^16 removals, 12-16 s under TSan; the stress test
// races removals (with the log tracked) from 4 threads.
TEST_ASAN_ONLY(Stress, RemovedLogIsBoundedAndOnlyKeptWhenTracked, "one thread, 4M removals; the stress test races removals") {
  InitSpec spec;
  EmbeddingTable t(2, spec);
  std::vector<int64_t> keys(200000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 31;
  std::vector<float> out(keys.size() * 2);
  t.Lookup(keys.data(), keys.size(), true, false, out.data());
  t.Remove(keys.data(), keys.size());
  CHECK_EQ(t.Stats().removed_logged, 0);  // not tracking: nothing kept
  t.SetTrackRemoved(true);
  t.Lookup(keys.data(), 1000, true, false, out.data());
  t.Remove(keys.data(), 1000);
  TableSnapshot snap;
  std::vector<int64_t> removed;
  bool complete = true;
  TableSnapshots(t).ExportDelta(0, &snap, &removed, &complete);
  CHECK(!complete);
  CHECK_EQ(static_cast<int64_t>(removed.size()), 1000);
  // Past the bound the log is dropped and the next delta is complete (every row).
  const int64_t past_the_bound = 64 * kMaxRemovedPerShard / static_cast<int64_t>(keys.size() - 5) + 2;
  for (int64_t round = 0; round < past_the_bound; ++round) {
    t.Lookup(keys.data(), keys.size(), true, false, out.data());
    t.Remove(keys.data(), keys.size() - 5);
    CHECK(t.Stats().removed_logged <= 64 * kMaxRemovedPerShard);
  }
  TableSnapshots(t).ExportDelta(1 << 30, &snap, &removed, &complete);
  CHECK(complete);
  CHECK(removed.empty());
  CHECK_EQ(static_cast<int64_t>(snap.keys.size()), 5);
  TableSnapshot full;
  TableSnapshots(t).Export(&full);
  EmbeddingTable u(2, spec);
  std::vector<float> junk(100 * 2);
  u.Lookup(keys.data() + 1000, 100, true, false, junk.data());
  std::string error;
  CHECK(TableSnapshots(u).ImportDelta(snap, removed, complete, &error));  // replaces: the 100 others are gone
  CHECK_EQ(u.size(), 5);
  t.ResetRemoved();
  CHECK_EQ(t.Stats().removed_logged, 0);
}
