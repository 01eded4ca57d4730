// Unit tests of the removed-keys log (removed_log.h) against a plain list of (key, step), and
// of the log as the table's deltas use it.
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/table_snapshots.h"
#include "kernels/core/removed_log.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(RemovedLog, RemovedLogTakesTheKeysStampedSinceAStep) {
  RemovedLog log;
  std::mt19937_64 rng(6);
  std::vector<std::pair<int64_t, int64_t>> oracle;
  for (int round = 0; round < 20; ++round) {
    const int n = static_cast<int>(rng() % 500);
    for (int i = 0; i < n; ++i) {
      const int64_t key = static_cast<int64_t>(rng() % 1000) - 500, step = static_cast<int64_t>(rng() % 100);
      log.Log(key, step);
      oracle.emplace_back(key, step);
    }
    CHECK_EQ(log.size(), static_cast<int64_t>(oracle.size()));
    CHECK_EQ(log.bytes_in_use(), static_cast<int64_t>(oracle.size() * 16));
    const int64_t since = static_cast<int64_t>(rng() % 100);
    std::vector<int64_t> want = {-7};  // Take appends
    for (const auto& [key, step] : oracle) {
      if (step >= since) want.push_back(key);
    }
    std::vector<int64_t> got = {-7};
    CHECK(!log.Take(since, &got));
    CHECK(got == want);
    CHECK_EQ(log.size(), 0);
    CHECK_EQ(log.bytes_reserved(), 0);
    oracle.clear();
  }
}

TEST(RemovedLog, RemovedLogOverflowsPastItsBound) {
  RemovedLog log;
  for (int64_t k = 0; k < kMaxRemovedPerShard; ++k) log.Log(k, 1);
  CHECK(!log.overflowed());
  CHECK_EQ(log.size(), kMaxRemovedPerShard);
  log.Log(-1, 1);  // one more: the keys are dropped, the next delta carries every row
  CHECK(log.overflowed());
  CHECK_EQ(log.size(), 0);
  CHECK_EQ(log.bytes_reserved(), 0);
  log.Log(-2, 1);  // ignored until taken
  CHECK_EQ(log.size(), 0);
  std::vector<int64_t> keys;
  CHECK(log.Take(0, &keys));
  CHECK(keys.empty());
  CHECK(!log.overflowed());
  log.Log(5, 2);
  CHECK_EQ(log.size(), 1);
  log.Clear();
  CHECK_EQ(log.size(), 0);
  CHECK(!log.Take(0, &keys));
  CHECK(keys.empty());
}

TEST(RemovedLog, RemovalTrackingKeepsTheLatestStep) {
  RemovalTracking tracking;
  CHECK(!tracking.on());
  tracking.set_on(true);
  CHECK(tracking.on());
  CHECK_EQ(tracking.stamp(), 0);
  // Four threads note steps in different orders: the stamp ends at the largest.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tracking, t] {
      for (int64_t s = 0; s < 5000; ++s) tracking.NoteStep(t % 2 ? s : 5000 - s + t);
    });
  }
  for (auto& th : threads) th.join();
  CHECK_EQ(tracking.stamp(), 5002);
  tracking.NoteStep(3);  // never goes back
  CHECK_EQ(tracking.stamp(), 5002);
}

TEST(RemovedLog, TableDeltasCarryTheRemovedKeysOnce) {
  // Oracle: the set of keys removed (Remove or Evict) while tracking is on.
  EmbeddingTable t(2, InitSpec());
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 3000; ++k) keys.push_back(k * 7 - 1000);
  std::vector<float> vals(keys.size() * 2, 1.f);
  t.Assign(keys.data(), static_cast<int64_t>(keys.size()), vals.data());
  t.Remove(keys.data(), 10);  // not tracked yet
  t.SetTrackRemoved(true, 4);
  std::set<int64_t> removed(keys.begin() + 10, keys.begin() + 500);
  CHECK_EQ(t.Remove(keys.data(), 500), 490);
  // Keys 1000.. updated at step 9; evicting rows not updated since step 6 drops the rest.
  t.Update(keys.data() + 1000, 2000, 9, [](int64_t, float*, uint32_t) {});
  IdleRows age(3);
  CHECK_EQ(t.Evict({&age}, 10), 500);
  removed.insert(keys.begin() + 500, keys.begin() + 1000);
  CHECK_EQ(t.Stats().removed_logged, 990);
  TableSnapshot snap;
  std::vector<int64_t> gone;
  bool complete = true;
  TableSnapshots(t).ExportDelta(4, &snap, &gone, &complete);
  CHECK(!complete);
  CHECK(std::set<int64_t>(gone.begin(), gone.end()) == removed);
  CHECK_EQ(gone.size(), removed.size());
  CHECK_EQ(snap.keys.size(), 2000u);  // the rows updated since step 4
  TableSnapshots(t).ExportDelta(4, &snap, &gone, &complete);  // the log was emptied
  CHECK(gone.empty());
  CHECK_EQ(t.Stats().removed_logged, 0);
  // Off: nothing is logged.
  t.SetTrackRemoved(false);
  t.Remove(keys.data() + 1000, 10);
  CHECK_EQ(t.Stats().removed_logged, 0);
}
