// Unit tests of Eviction (eviction.h) against each rule written out by hand and a sort of
// all rows, and of eviction in the table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/eviction.h"
#include "tests/cc/test_main.h"

using namespace tfps::core;

namespace {

EvictPolicy RandomPolicy(std::mt19937_64& rng) {
  EvictPolicy p;
  if (rng() % 2) p.after_steps = static_cast<int64_t>(rng() % 50);
  if (rng() % 2) p.min_freq = static_cast<int64_t>(rng() % 20);
  if (rng() % 2) p.l2_below = static_cast<float>(rng() % 300) * 0.01f;
  if (rng() % 2) p.max_rows = static_cast<int64_t>(rng() % 200);
  p.lru = rng() % 2;
  return p;
}

// The rules as the policy states them.
bool Doomed(const EvictPolicy& p, int64_t step, const std::vector<float>& value, uint32_t freq, uint32_t last) {
  double sq = 0;
  for (float v : value) sq += static_cast<double>(v) * v;
  return (p.after_steps >= 0 && step - static_cast<int64_t>(last) > p.after_steps) ||
         (p.min_freq >= 0 && static_cast<int64_t>(freq) < p.min_freq) ||
         (p.l2_below >= 0.f && std::sqrt(sq) < static_cast<double>(p.l2_below));
}

}  // namespace

TEST(EvictionRulesSelectWhatThePolicySays) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int trial = 0; trial < 200; ++trial) {
    const EvictPolicy p = RandomPolicy(rng);
    const int64_t step = 40 + static_cast<int64_t>(rng() % 40), dim = 1 + static_cast<int64_t>(rng() % 5);
    const Eviction eviction(p, step, dim);
    CHECK_EQ(eviction.has_rules(), p.after_steps >= 0 || p.min_freq >= 0 || p.l2_below >= 0.f);
    CHECK_EQ(eviction.has_cap(), p.max_rows >= 0);
    for (int r = 0; r < 50; ++r) {
      std::vector<float> value(dim);
      for (float& v : value) v = u(rng);
      const uint32_t meta[2] = {static_cast<uint32_t>(rng() % 25), static_cast<uint32_t>(rng() % 80)};
      CHECK_EQ(eviction.Selects(value.data(), meta), Doomed(p, step, value, meta[0], meta[1]));
    }
  }
}

TEST(EvictionCapDropsTheLowestRanked) {
  // Oracle: every (score, key) sorted; the first size - max_rows go. Scores repeat, so ties
  // are broken by key.
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    EvictPolicy p;
    p.max_rows = static_cast<int64_t>(rng() % 300);
    p.lru = rng() % 2;
    Eviction eviction(p, 100, 1);
    const int n = static_cast<int>(rng() % 400);
    std::vector<std::pair<uint32_t, int64_t>> ranked;
    for (int i = 0; i < n; ++i) {
      const uint32_t meta[2] = {static_cast<uint32_t>(rng() % 10), static_cast<uint32_t>(rng() % 10)};
      const int64_t key = static_cast<int64_t>(i) * 13 - 2000;
      eviction.Rank(meta, key);
      ranked.emplace_back(meta[p.lru ? 1 : 0], key);
    }
    std::sort(ranked.begin(), ranked.end());
    std::set<int64_t> want;
    for (int64_t i = 0; i < n - p.max_rows; ++i) want.insert(ranked[i].second);
    const std::vector<int64_t> got = eviction.OverCap();
    CHECK_EQ(got.size(), want.size());
    CHECK(std::set<int64_t>(got.begin(), got.end()) == want);
    CHECK(eviction.OverCap().empty());  // the ranks are forgotten
  }
}

TEST(TableEvictionMatchesTheRulesThenTheCap) {
  // A table with random values, update counts and steps; Evict against the rules and the cap
  // applied by hand to its export.
  std::mt19937_64 rng(10);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int trial = 0; trial < 20; ++trial) {
    EmbeddingTable t(3, InitSpec());
    const int n = 500 + static_cast<int>(rng() % 500);
    std::vector<int64_t> keys(n);
    std::vector<float> vals(n * 3);
    for (int i = 0; i < n; ++i) keys[i] = static_cast<int64_t>(rng());
    for (float& v : vals) v = u(rng);
    t.Assign(keys.data(), n, vals.data());
    for (int i = 0; i < n; ++i) {
      const int updates = static_cast<int>(rng() % 15);
      for (int k = 0; k < updates; ++k) t.Update(&keys[i], 1, static_cast<int64_t>(rng() % 80), [](int64_t, float*, uint32_t) {});
    }
    const EvictPolicy p = RandomPolicy(rng);
    TableSnapshot before;
    t.Export(&before);
    std::vector<std::tuple<uint32_t, int64_t>> left;  // (score, key) after the rules
    for (size_t i = 0; i < before.keys.size(); ++i) {
      const std::vector<float> value(before.values.begin() + 3 * i, before.values.begin() + 3 * i + 3);
      const auto freq = static_cast<uint32_t>(before.freq[i]), last = static_cast<uint32_t>(before.last_step[i]);
      if (!Doomed(p, 90, value, freq, last)) left.emplace_back(p.lru ? last : freq, before.keys[i]);
    }
    std::sort(left.begin(), left.end());
    const size_t drop = p.max_rows >= 0 && static_cast<int64_t>(left.size()) > p.max_rows ? left.size() - p.max_rows : 0;
    std::set<int64_t> want;
    for (size_t i = drop; i < left.size(); ++i) want.insert(std::get<1>(left[i]));
    CHECK_EQ(t.Evict(p, 90), n - static_cast<int64_t>(want.size()));
    TableSnapshot after;
    t.Export(&after);
    CHECK(std::set<int64_t>(after.keys.begin(), after.keys.end()) == want);
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
