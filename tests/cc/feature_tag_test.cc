// Unit tests of a merged table's keys (feature_tag.h): the tag in the high bits, an id in
// [0, 2^48) kept exactly, any other id mixed into the low 48 bits, one tag per feature.
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "kernels/core/feature_tag.h"
#include "kernels/core/hash.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(FeatureTag, TagsAreOneTo32767) {
  CHECK(!ValidTag(0) && !ValidTag(-1) && !ValidTag(32768) && !ValidTag(std::numeric_limits<int64_t>::min()));
  CHECK(ValidTag(1) && ValidTag(32767) && kMaxTag == 32767);
}

TEST(FeatureTag, AnIdBelow2To48KeepsItsValueAndTheTagItsBits) {
  std::mt19937_64 rng(48);
  for (int trial = 0; trial < 10000; ++trial) {
    const int64_t tag = 1 + static_cast<int64_t>(rng() % kMaxTag);
    const int64_t id = static_cast<int64_t>(rng() & ((uint64_t{1} << 48) - 1));
    const int64_t key = TaggedKey(tag, id);
    CHECK(key > 0);
    CHECK_EQ(key >> 48, tag);
    CHECK_EQ(key & ((int64_t{1} << 48) - 1), id);
  }
  CHECK_EQ(TaggedKey(kMaxTag, (int64_t{1} << 48) - 1), std::numeric_limits<int64_t>::max());
  CHECK_EQ(TaggedKey(1, 0), int64_t{1} << 48);
}

TEST(FeatureTag, AnyOtherIdIsMixedIntoTheLow48Bits) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> ids = {-1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                              int64_t{1} << 48};
  for (int i = 0; i < 1000; ++i) ids.push_back(static_cast<int64_t>(rng() | (uint64_t{1} << 62)));
  std::set<int64_t> keys;
  for (int64_t id : ids) {
    const int64_t key = TaggedKey(5, id);
    CHECK_EQ(key >> 48, 5);
    const uint64_t low = Mix64(static_cast<uint64_t>(id)) & ((uint64_t{1} << 48) - 1);
    CHECK_EQ(static_cast<uint64_t>(key & ((int64_t{1} << 48) - 1)), low);
    keys.insert(key);
  }
  CHECK_EQ(keys.size(), ids.size());   // these ids happen to mix to distinct keys
}

TEST(FeatureTag, TagKeysTakesATagPerFeatureAlongTheLastDim) {
  const std::vector<int64_t> ids = {3, 4, 5, 6, 7, 8};   // 2 rows of 3 features
  const std::vector<int64_t> tags = {10, 20, 30};
  std::vector<int64_t> out(ids.size());
  TagKeys(ids.data(), static_cast<int64_t>(ids.size()), tags.data(), 3, out.data());
  for (size_t i = 0; i < ids.size(); ++i) CHECK_EQ(out[i], TaggedKey(tags[i % 3], ids[i]));
  const int64_t one = 9;   // width 1: one tag for all
  TagKeys(ids.data(), static_cast<int64_t>(ids.size()), &one, 1, out.data());
  for (size_t i = 0; i < ids.size(); ++i) CHECK_EQ(out[i], (int64_t{9} << 48) | ids[i]);
}
