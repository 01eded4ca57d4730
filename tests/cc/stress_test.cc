// Two threads train, insert, remove and export one table at once; the contents are checked.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "tests/cc/test_main.h"

using namespace tfps::core;

TEST(StressTwoThreadsKeepContentsConsistent) {
  InitSpec spec;
  spec.kind = InitSpec::kConstant;
  spec.a = 0.f;
  const int64_t dim = 4;
  EmbeddingTable t(dim, spec);
  const float init = 0.f;
  std::string error;
  CHECK(t.EnsureSlots(1, &init, &error));
  const int kKeys = 4000, kRounds = 300;
  // Thread w owns keys congruent to w mod 2 for updates; both look up all keys.
  std::vector<int> updates(kKeys, 0);
  std::atomic<bool> bad_export{false};
  auto worker = [&](int w) {
    std::vector<int64_t> mine, all;
    for (int k = 0; k < kKeys; ++k) {
      all.push_back(k * 7919LL - 100000);
      if (k % 2 == w) mine.push_back(k * 7919LL - 100000);
    }
    std::vector<float> out(all.size() * dim);
    for (int r = 0; r < kRounds; ++r) {
      t.Lookup(all.data(), all.size(), true, false, out.data());
      // Each update adds 1 to every value and to the slot: value == slot in every row.
      t.Update(mine.data(), mine.size(), r, [&](int64_t, float* row, uint32_t) {
        for (int64_t j = 0; j < 2 * dim; ++j) row[j] += 1.f;
      });
      if (w == 0 && r % 50 == 0) {
        TableSnapshot snap;
        t.Export(&snap);
        for (size_t i = 0; i < snap.keys.size(); ++i) {
          for (int64_t j = 0; j < dim; ++j) {
            if (snap.values[i * dim + j] != snap.slots[i * dim + j]) bad_export = true;
          }
        }
      }
      // Churn: a private key range inserted and removed each round.
      std::vector<int64_t> churn;
      for (int k = 0; k < 200; ++k) churn.push_back(1000000000LL * (w + 1) + r * 200 + k);
      std::vector<float> tmp(churn.size() * dim);
      t.Lookup(churn.data(), churn.size(), true, false, tmp.data());
      CHECK_EQ(t.Remove(churn.data(), churn.size()), 200);
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(!bad_export.load());
  CHECK_EQ(t.size(), kKeys);
  TableSnapshot snap;
  t.Export(&snap);
  for (size_t i = 0; i < snap.keys.size(); ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      CHECK(snap.values[i * dim + j] == static_cast<float>(kRounds));
      CHECK(snap.slots[i * dim + j] == static_cast<float>(kRounds));
    }
    CHECK_EQ(snap.freq[i], kRounds);  // one update per round by the key's owner
    CHECK_EQ(snap.last_step[i], kRounds - 1);
  }
  // Removed rows went back to the pool: rows in use equal live keys.
  CHECK_EQ(t.Stats().rows, kKeys);
}
