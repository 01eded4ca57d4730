// Unit tests of the eviction policies (eviction.h), each against its rule written out by hand
// (the caps against a sort of all rows), and of eviction in the table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/table_snapshots.h"
#include "kernels/core/eviction.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

// What a test asks for, as the op's attributes say it (< 0: off); EvictionPolicies makes its policies.
using Rules = EvictionRules;

Rules RandomRules(std::mt19937_64& rng) {
  Rules p;
  if (rng() % 2) p.after_steps = static_cast<int64_t>(rng() % 50);
  if (rng() % 2) p.min_freq = static_cast<int64_t>(rng() % 20);
  if (rng() % 2) p.l2_below = static_cast<float>(rng() % 300) * 0.01f;
  if (rng() % 2) p.max_rows = static_cast<int64_t>(rng() % 200);
  p.lru = rng() % 2;
  return p;
}

// The row rules as stated.
bool Doomed(const Rules& p, int64_t step, const std::vector<float>& value, uint32_t freq, uint32_t last) {
  double sq = 0;
  for (float v : value) sq += static_cast<double>(v) * v;
  return (p.after_steps >= 0 && step - static_cast<int64_t>(last) > p.after_steps) ||
         (p.min_freq >= 0 && static_cast<int64_t>(freq) < p.min_freq) ||
         (p.l2_below >= 0.f && std::sqrt(sq) < static_cast<double>(p.l2_below));
}

RowView View(int64_t key, const std::vector<float>& value, uint32_t freq, uint32_t last) {
  return RowView{key, value.data(), static_cast<int64_t>(value.size()), freq, last};
}

}  // namespace

TEST(Eviction, EachRowRuleSelectsWhatItStates) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t after = static_cast<int64_t>(rng() % 50), min_freq = static_cast<int64_t>(rng() % 20);
    const float l2 = static_cast<float>(rng() % 300) * 0.01f;
    const IdleRows idle(after);
    const RareRows rare(min_freq);
    const SmallRows small(l2);
    CHECK(!idle.ranks() && !rare.ranks() && !small.ranks());
    const int64_t step = 40 + static_cast<int64_t>(rng() % 40), dim = 1 + static_cast<int64_t>(rng() % 5);
    for (int r = 0; r < 50; ++r) {
      std::vector<float> value(dim);
      for (float& v : value) v = u(rng);
      const auto freq = static_cast<uint32_t>(rng() % 25), last = static_cast<uint32_t>(rng() % 80);
      const RowView row = View(r, value, freq, last);
      Rules only;
      only.after_steps = after;
      CHECK_EQ(idle.Selects(row, step), Doomed(only, step, value, freq, last));
      only = Rules();
      only.min_freq = min_freq;
      CHECK_EQ(rare.Selects(row, step), Doomed(only, step, value, freq, last));
      only = Rules();
      only.l2_below = l2;
      CHECK_EQ(small.Selects(row, step), Doomed(only, step, value, freq, last));
    }
  }
}

TEST(Eviction, RowRulesAtTheirBoundaries) {
  const std::vector<float> v34 = {3.f, 4.f};  // norm 5
  // Idle for exactly after_steps steps stays; one more goes.
  CHECK(!IdleRows(10).Selects(View(1, v34, 0, 90), 100));
  CHECK(IdleRows(10).Selects(View(1, v34, 0, 89), 100));
  CHECK(!IdleRows(0).Selects(View(1, v34, 0, 100), 100));
  // freq equal to min_freq stays; min_freq 0 selects nothing.
  CHECK(!RareRows(3).Selects(View(1, v34, 3, 0), 0));
  CHECK(RareRows(3).Selects(View(1, v34, 2, 0), 0));
  CHECK(!RareRows(0).Selects(View(1, v34, 0, 0), 0));
  // A norm equal to l2_below stays; l2_below 0 selects nothing, not even a zero row.
  CHECK(!SmallRows(5.f).Selects(View(1, v34, 0, 0), 0));
  CHECK(SmallRows(5.0001f).Selects(View(1, v34, 0, 0), 0));
  CHECK(!SmallRows(0.f).Selects(View(1, std::vector<float>{0.f, 0.f}, 0, 0), 0));
}

TEST(Eviction, PoliciesRefuseNegativeSettings) {
  auto refused = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument&) {
      return true;
    }
    return false;
  };
  CHECK(refused([] { IdleRows p(-1); }));
  CHECK(refused([] { RareRows p(-2); }));
  CHECK(refused([] { SmallRows p(-0.5f); }));
  CHECK(refused([] { SmallRows p(std::numeric_limits<float>::quiet_NaN()); }));
  CHECK(refused([] { LfuCap p(-1); }));
  CHECK(refused([] { LruCap p(-1); }));
  CHECK(!refused([] { LruCap p(0); }));
}

TEST(Eviction, CapsDropTheLowestRanked) {
  // Oracle: every (score, key) sorted; the first size - max_rows go. Scores repeat, so ties
  // are broken by key. LfuCap ranks by freq, LruCap by last_step.
  std::mt19937_64 rng(9);
  const std::vector<float> value = {1.f};
  for (int trial = 0; trial < 100; ++trial) {
    const bool lru = trial % 2;
    const int64_t max_rows = trial % 10 == 0 ? 0 : static_cast<int64_t>(rng() % 300);
    LfuCap lfu(max_rows);
    LruCap lru_cap(max_rows);
    RowCap& cap = lru ? static_cast<RowCap&>(lru_cap) : lfu;
    CHECK(cap.ranks());
    const int n = static_cast<int>(rng() % 400);
    std::vector<std::pair<uint32_t, int64_t>> ranked;
    std::vector<RowView> rows;
    for (int i = 0; i < n; ++i) {
      const auto freq = static_cast<uint32_t>(rng() % 10), last = static_cast<uint32_t>(rng() % 10);
      rows.push_back(View(static_cast<int64_t>(i) * 13 - 2000, value, freq, last));
      cap.Rank(rows.back());
      ranked.emplace_back(lru ? last : freq, rows.back().key);
    }
    cap.Ranked();
    std::sort(ranked.begin(), ranked.end());
    std::set<int64_t> want;
    for (int64_t i = 0; i < n - max_rows; ++i) want.insert(ranked[i].second);
    std::set<int64_t> got;
    for (const RowView& r : rows) {
      if (cap.Selects(r, 100)) got.insert(r.key);
    }
    CHECK(got == want);
    cap.Ranked();  // the ranks are forgotten: nothing over the cap now
    for (const RowView& r : rows) CHECK(!cap.Selects(r, 100));
  }
}

TEST(Eviction, TableEvictionMatchesTheRulesThenTheCap) {
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
    const Rules p = RandomRules(rng);
    TableSnapshot before;
    TableSnapshots(t).Export(&before);
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
    const EvictionPolicies policies(p);
    CHECK_EQ(t.Evict(policies.get(), 90), n - static_cast<int64_t>(want.size()));
    TableSnapshot after;
    TableSnapshots(t).Export(&after);
    CHECK(std::set<int64_t>(after.keys.begin(), after.keys.end()) == want);
  }
}

TEST(Eviction, EvictByRulesAndCapReturnsRowsToThePool) {
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
  RareRows freq(3);  // drops i % 10 in {0, 1, 2}
  CHECK_EQ(t.Evict({&freq}, 1000), 300);
  IdleRows age(200);  // at step 1000: drops last_step < 800
  const int64_t old = t.Evict({&age}, 1000);
  CHECK_EQ(old, 560);  // i < 800 with i % 10 >= 3
  CHECK_EQ(t.size(), 140);
  LfuCap cap(50);  // the 50 most updated survive
  CHECK_EQ(t.Evict({&cap}, 1000), 90);
  TableSnapshot snap;
  TableSnapshots(t).Export(&snap);
  for (int64_t f : snap.freq) CHECK(f >= 7);
  // Re-inserting after eviction reuses the freed rows: no new memory.
  t.Assign(keys.data(), keys.size(), vals.data());
  CHECK_EQ(t.size(), 1000);
  CHECK_EQ(t.Stats().bytes_reserved, reserved);
  SmallRows l2(2.f);  // all values are (1, 1): norm 1.41
  CHECK_EQ(t.Evict({&l2}, 1000), 1000);
}
