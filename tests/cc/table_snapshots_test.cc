// Unit tests of the table's locked visit API (VisitShards, ModifyRows, ReplaceRows) and of
// TableSnapshots over it: a delta applied to a copy of an earlier state gives the source's
// contents, row for row; what is refused leaves the table as it was.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/table_snapshots.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

constexpr int64_t kDim = 3;

// A snapshot as a map key -> (value and slots, freq, last_step): independent of row order.
using Rows = std::map<int64_t, std::tuple<std::vector<float>, int64_t, int64_t>>;

Rows RowsOf(const TableSnapshot& s) {
  Rows rows;
  const int64_t slot_floats = s.dim * s.num_slots;
  for (size_t i = 0; i < s.keys.size(); ++i) {
    std::vector<float> v(s.values.begin() + i * s.dim, s.values.begin() + (i + 1) * s.dim);
    v.insert(v.end(), s.slots.begin() + i * slot_floats, s.slots.begin() + (i + 1) * slot_floats);
    CHECK(rows.emplace(s.keys[i], std::make_tuple(v, s.freq[i], s.last_step[i])).second);  // a key once
  }
  return rows;
}

Rows RowsOf(EmbeddingTable& t) {
  TableSnapshot s;
  TableSnapshots(t).Export(&s);
  return RowsOf(s);
}

// A table of n keys with one slot, each row updated a random number of times at random steps.
void Fill(EmbeddingTable* t, std::mt19937_64& rng, const std::vector<int64_t>& keys) {
  std::vector<float> vals(keys.size() * kDim);
  for (float& v : vals) v = static_cast<float>(rng() % 1000) * 0.01f;
  t->Assign(keys.data(), static_cast<int64_t>(keys.size()), vals.data());
  const float init = 0.25f;
  std::string error;
  CHECK(t->EnsureSlots(1, &init, &error));
  for (const int64_t& k : keys) {
    for (int u = static_cast<int>(rng() % 4); u > 0; --u) {
      t->Update(&k, 1, static_cast<int64_t>(rng() % 10), [](int64_t, float* row, uint32_t) {
        row[0] += 1.f;
        row[kDim] += 2.f;
      });
    }
  }
}

}  // namespace

TEST(TableSnapshots, VisitShardsSeesEveryRowOnceInOneLayout) {
  std::mt19937_64 rng(1);
  EmbeddingTable t(kDim, InitSpec());
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 2000; ++k) keys.push_back(k * 104729 - 77);
  Fill(&t, rng, keys);
  const Rows want = RowsOf(t);
  Rows seen;
  int begins = 0;
  int64_t slot_floats = -1;
  t.VisitShards(
      false,
      [&](const RowLayout& layout) {
        ++begins;
        CHECK(layout.dim == kDim && layout.num_slots == 1 && layout.slot_init == std::vector<float>{0.25f});
        slot_floats = layout.dim * layout.num_slots;
      },
      [&](EmbeddingTable::LockedShard& shard) {
        shard.ForEachRow([&](int64_t key, const float* row, const RowMeta& meta) {
          std::vector<float> v(row, row + kDim + slot_floats);
          CHECK(seen.emplace(key, std::make_tuple(v, meta.freq, meta.last_step)).second);
        });
        // The removed-keys log is only taken in an exclusive visit.
        std::vector<int64_t> removed;
        bool refused = false;
        try {
          shard.TakeRemoved(0, &removed);
        } catch (const std::logic_error&) {
          refused = true;
        }
        CHECK(refused);
      });
  CHECK_EQ(begins, 1);
  CHECK(seen == want);
}

TEST(TableSnapshots, ModifyRowsWritesPresentRowsAndClampsTheirMeta) {
  EmbeddingTable t(kDim, InitSpec());
  const int64_t keys[] = {4, 8, 15};
  const float vals[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  t.Assign(keys, 3, vals);
  const int64_t asked[] = {8, 16, 4, 23};  // 16 and 23 are missing
  const int64_t visited = t.ModifyRows(asked, 4, [&](int64_t i, float* row, RowMeta* meta) {
    CHECK(asked[i] == 8 || asked[i] == 4);
    row[1] = static_cast<float>(100 + i);
    *meta = i == 0 ? RowMeta{-5, int64_t{1} << 40} : RowMeta{7, 3};
  });
  CHECK_EQ(visited, 2);
  CHECK_EQ(t.size(), 3);
  const Rows rows = RowsOf(t);
  CHECK(std::get<0>(rows.at(8)) == (std::vector<float>{4, 100, 6}));
  CHECK(std::get<1>(rows.at(8)) == 0 && std::get<2>(rows.at(8)) == 4294967295LL);  // clamped to uint32
  CHECK(std::get<0>(rows.at(4)) == (std::vector<float>{1, 102, 3}));
  CHECK(std::get<1>(rows.at(4)) == 7 && std::get<2>(rows.at(4)) == 3);
  CHECK(std::get<0>(rows.at(15)) == (std::vector<float>{7, 8, 9}) && std::get<1>(rows.at(15)) == 0);
}

TEST(TableSnapshots, ReplaceRowsRefusesARepeatedKeyAndLeavesTheTable) {
  std::mt19937_64 rng(2);
  EmbeddingTable t(kDim, InitSpec());
  Fill(&t, rng, {1, 2, 3, 5, 8});
  const Rows before = RowsOf(t);
  const int64_t keys[] = {10, 11, 10};
  std::string error;
  auto fill = [](int64_t, float* row) {
    std::fill(row, row + kDim, 9.f);
    return RowMeta{1, 1};
  };
  CHECK(!t.ReplaceRows(RowLayout{kDim, 0, {}}, keys, 3, fill, &error));
  CHECK(error.find("10") != std::string::npos);
  CHECK(!t.ReplaceRows(RowLayout{kDim + 1, 0, {}}, keys, 2, fill, &error));  // not the table's dim
  CHECK(!t.ReplaceRows(RowLayout{kDim, 2, {0.f}}, keys, 2, fill, &error));    // 2 slots, 1 initial value
  CHECK(RowsOf(t) == before);
  CHECK_EQ(t.num_slots(), 1);
  // A good one replaces the contents and fixes the layout (here: no slots).
  CHECK(t.ReplaceRows(RowLayout{kDim, 0, {}}, keys, 2, fill, &error));
  CHECK_EQ(t.size(), 2);
  CHECK_EQ(t.num_slots(), 0);
  const Rows now = RowsOf(t);
  CHECK(std::get<0>(now.at(11)) == (std::vector<float>{9, 9, 9}) && std::get<1>(now.at(11)) == 1);
}

TEST(TableSnapshots, DeltaOnACopyOfAnEarlierStateGivesTheSourceRowForRow) {
  // Source a; b a full copy of it at step 10; then a trains on (updates, new keys, removals
  // and evictions, tracked); a's delta since step 10 applied to b makes b equal a.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 5; ++trial) {
    EmbeddingTable a(kDim, InitSpec()), b(kDim, InitSpec());
    std::vector<int64_t> keys;
    for (int64_t k = 0; k < 3000; ++k) keys.push_back(static_cast<int64_t>(rng()));
    Fill(&a, rng, keys);
    a.SetTrackRemoved(true, 10);
    TableSnapshot full;
    TableSnapshots(a).Export(&full);
    std::string error;
    CHECK(TableSnapshots(b).Import(full, &error));
    CHECK(RowsOf(b) == RowsOf(a));
    // Training after step 10: updates of some rows, new rows (updated: a delta carries
    // updated rows), removals.
    for (int i = 0; i < 500; ++i) {
      const int64_t k = keys[rng() % keys.size()];
      a.Update(&k, 1, 10 + static_cast<int64_t>(rng() % 5), [](int64_t, float* row, uint32_t) { row[1] -= 0.5f; });
    }
    std::vector<int64_t> fresh;
    for (int i = 0; i < 300; ++i) fresh.push_back(static_cast<int64_t>(rng()));
    std::vector<float> out(fresh.size() * kDim);
    a.Lookup(fresh.data(), static_cast<int64_t>(fresh.size()), true, false, out.data());
    a.Update(fresh.data(), static_cast<int64_t>(fresh.size()), 12, [](int64_t, float* row, uint32_t) { row[0] = 3.f; });
    a.Remove(keys.data(), 200);
    TableSnapshot delta;
    std::vector<int64_t> removed;
    bool complete = true;
    TableSnapshots(a).ExportDelta(10, &delta, &removed, &complete);
    CHECK(!complete);
    CHECK_EQ(std::set<int64_t>(removed.begin(), removed.end()).size(), 200u);
    CHECK(static_cast<int64_t>(delta.keys.size()) < a.size());  // a delta, not every row
    CHECK(TableSnapshots(b).ImportDelta(delta, removed, complete, &error));
    CHECK(RowsOf(b) == RowsOf(a));
  }
}

TEST(TableSnapshots, SnapshotsRefuseWhatDoesNotFitAndChangeNothing) {
  std::mt19937_64 rng(4);
  EmbeddingTable t(kDim, InitSpec());
  Fill(&t, rng, {1, 2, 3});
  const Rows before = RowsOf(t);
  TableSnapshot snap;
  TableSnapshots(t).Export(&snap);
  std::string error;
  TableSnapshot bad = snap;
  bad.freq.pop_back();
  CHECK(!TableSnapshots::Check(bad, kDim, &error));
  CHECK(!TableSnapshots(t).Import(bad, &error));
  CHECK(!TableSnapshots(t).ImportDelta(bad, {}, false, &error));
  CHECK(!TableSnapshots::Check(snap, kDim + 1, &error));
  // A delta with another slot count than the table's.
  TableSnapshot two = snap;
  two.num_slots = 2;
  two.slots.resize(two.slots.size() * 2, 0.f);
  two.slot_init = {0.f, 0.f};
  CHECK(TableSnapshots::Check(two, kDim, &error));
  CHECK(!TableSnapshots(t).ImportDelta(two, {1}, false, &error));
  CHECK(error.find("optimizer slots") != std::string::npos);
  // A repeated key in a full import.
  TableSnapshot twice = snap;
  twice.keys[1] = twice.keys[0];
  CHECK(!TableSnapshots(t).Import(twice, &error));
  CHECK(RowsOf(t) == before);
}
