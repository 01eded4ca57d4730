// Unit tests of AdmissionSketch (admission_sketch.h) against exact counts in a
// std::unordered_map, and of admission in the table.
#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "kernels/core/admission_sketch.h"
#include "kernels/core/embedding_table.h"
#include "kernels/core/hash.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(Admission, SketchNeverCountsBelowTheTruth) {
  // Half as many keys as counters a row: collisions are common, and with them estimates above
  // the truth; never below it (no aging: the sightings stay under kSketchAgeFactor * width).
  // Sparse keys: every estimate is exact.
  for (const int64_t keys : {2000, 20}) {
    AdmissionSketch sketch(4096, 100);
    std::unordered_map<int64_t, uint32_t> truth;
    std::mt19937_64 rng(static_cast<uint64_t>(keys));
    int64_t total = 0, over = 0;
    for (int i = 0; i < 4000; ++i) {
      const int64_t key = static_cast<int64_t>(rng() % keys) * 7919 - 3;
      const uint32_t count = 1 + static_cast<uint32_t>(rng() % 7);
      const uint32_t before = sketch.Estimate(HashKey(key));
      const auto [was, now] = sketch.Count(HashKey(key), count);
      CHECK_EQ(was, before);
      CHECK_EQ(now, before + count);
      CHECK_EQ(sketch.Estimate(HashKey(key)), now);
      truth[key] += count;
      total += count;
    }
    CHECK(total < kSketchAgeFactor * 4096);
    for (const auto& [key, n] : truth) {
      const uint32_t e = sketch.Estimate(HashKey(key));
      CHECK(e >= n);
      over += e > n;
    }
    if (keys == 20) CHECK_EQ(over, 0);
    else CHECK(over > 0 && over < keys / 2);
  }
}

TEST(Admission, SketchSaturatesAndAges) {
  AdmissionSketch sketch(1 << 14, 10);  // ages every 2^17 sightings
  const uint64_t a = HashKey(1), b = HashKey(2);
  const auto [before, after] = sketch.Count(a, 70000);
  CHECK_EQ(before, 0u);
  CHECK_EQ(after, 65535u);
  CHECK_EQ(sketch.Estimate(a), 65535u);
  sketch.Count(b, 6);
  CHECK_EQ(sketch.pending(), 0);  // Count alone keeps no pending count; Admit does
  // The sightings reach 8 * width: every counter halves.
  sketch.Count(HashKey(3), static_cast<uint32_t>(kSketchAgeFactor * (1 << 14) - 70006));
  CHECK_EQ(sketch.Estimate(a), 32767u);
  CHECK_EQ(sketch.Estimate(b), 3u);
  CHECK_EQ(sketch.pending(), 1);  // b's first-row counter is in (0, 10)
}

TEST(Admission, SketchAdmitsAtTheThresholdAndCountsPending) {
  AdmissionSketch sketch(4096, 3);
  CHECK_EQ(sketch.min_count(), 3u);
  CHECK_EQ(sketch.width(), 4096);
  CHECK_EQ(sketch.bytes_in_use(), kSketchDepth * 4096 * 2);
  const uint64_t k = HashKey(5), q = HashKey(6);
  CHECK(!sketch.Admit(k, 1));
  CHECK_EQ(sketch.pending(), 1);
  CHECK(!sketch.Admit(k, 1));
  CHECK_EQ(sketch.pending(), 1);
  CHECK(sketch.Admit(k, 1));
  CHECK_EQ(sketch.pending(), 0);
  CHECK(sketch.Admit(q, 5));  // at once: never pending
  CHECK_EQ(sketch.pending(), 0);
  CHECK(sketch.Admit(k, 1));  // still at or above the threshold
  CHECK_EQ(sketch.pending(), -1);  // a key that looked seen before: the table clamps
  sketch.ClampPending();
  CHECK_EQ(sketch.pending(), 0);
  AdmissionSketch off;
  CHECK(off.empty());
  CHECK_EQ(off.bytes_reserved(), 0);
}

TEST(Admission, SketchLoadsAnyPowerOfTwoWidthWithoutLoweringAnEstimate) {
  AdmissionSketch saved(256, 50);
  std::mt19937_64 rng(4);
  std::vector<int64_t> keys;
  for (int i = 0; i < 300; ++i) {
    keys.push_back(static_cast<int64_t>(rng()));
    saved.Count(HashKey(keys.back()), 1 + static_cast<uint32_t>(rng() % 40));
  }
  const std::vector<int32_t> cells(saved.cells().begin(), saved.cells().end());
  for (const int64_t width : {64, 256, 1024}) {
    const AdmissionSketch loaded = AdmissionSketch::Loaded(width, 50, cells.data(), 256);
    CHECK_EQ(loaded.width(), width);
    CHECK_EQ(loaded.min_count(), 50u);
    for (int64_t key : keys) CHECK(loaded.Estimate(HashKey(key)) >= saved.Estimate(HashKey(key)));
    if (width == 256) CHECK(loaded.cells() == saved.cells());
    // pending: first-row counters in (0, 50), recomputed.
    int64_t pending = 0;
    for (int64_t j = 0; j < width; ++j) pending += loaded.cells()[j] > 0 && loaded.cells()[j] < 50;
    CHECK_EQ(loaded.pending(), pending);
  }
  // Saved counts are clipped to [0, 65535].
  std::vector<int32_t> wild(kSketchDepth * 4, -5);
  wild[1] = 70000;
  const AdmissionSketch clipped = AdmissionSketch::Loaded(4, 2, wild.data(), 4);
  CHECK_EQ(clipped.cells()[0], 0);
  CHECK_EQ(clipped.cells()[1], 65535);
}

TEST(Admission, TableAdmissionCountsSightingsBeforeARow) {
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
