// Unit tests of the batch dedup (unique.h) and its id set (id_set.h), against std containers.
#include <climits>
#include <random>
#include <set>
#include <unordered_map>

#include "kernels/core/hash.h"
#include "kernels/core/id_set.h"
#include "kernels/core/unique.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(Unique, UniqueMatchesReference) {
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

TEST(Unique, IdSetRobinHoodGrowsFromALowEstimate) {
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

TEST(Unique, UniquePartitionGroupsByPartitionInFirstOccurrenceOrder) {
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
