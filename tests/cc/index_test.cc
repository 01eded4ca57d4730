// Unit tests of TaggedIndex (tagged_index.h) against a std::unordered_map, with real hashes and
// with hashes built to collide: one tag for many keys, and homes at the last slot, so probe
// chains wrap around the end and backward-shift deletion moves entries across it.
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "kernels/core/hash.h"
#include "kernels/core/tagged_index.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

// The index over rows kept as the table keeps them: row id -> key (and its hash), ids
// recycled through a free list; the oracle maps key -> id.
struct Model {
  TaggedIndex index;
  std::vector<int64_t> key_of_id;
  std::vector<uint64_t> hash_of_id;
  std::vector<uint32_t> free_ids;
  std::unordered_map<int64_t, uint32_t> oracle;

  auto KeyOf() const {
    return [this](uint32_t id) { return key_of_id[id]; };
  }
  auto HashOf() const {
    return [this](uint32_t id) { return hash_of_id[id]; };
  }
  void Insert(int64_t key, uint64_t h) {
    index.Reserve(1, [&](const auto& place) {
      for (const auto& [k, id] : oracle) place(hash_of_id[id], id);
    });
    uint32_t id;
    if (!free_ids.empty()) {
      id = free_ids.back();
      free_ids.pop_back();
    } else {
      id = static_cast<uint32_t>(key_of_id.size());
      key_of_id.push_back(0);
      hash_of_id.push_back(0);
    }
    key_of_id[id] = key;
    hash_of_id[id] = h;
    const int64_t pos = index.FindOrEmpty(h, key, KeyOf());
    CHECK(index.EmptyAt(pos));
    index.FillAt(pos, h, id);
    oracle[key] = id;
  }
  void Erase(int64_t key, uint64_t h) {
    const int64_t pos = index.Find(h, key, KeyOf());
    CHECK(pos >= 0);
    const uint32_t id = index.EraseAt(pos, HashOf());
    CHECK_EQ(id, oracle[key]);
    free_ids.push_back(id);
    oracle.erase(key);
  }
  // Every key of the oracle is found with its id; Candidate leads to a slot of the key's tag.
  void CheckAll() const {
    CHECK_EQ(index.size(), static_cast<int64_t>(oracle.size()));
    CHECK(static_cast<double>(index.size()) <= kMaxLoadFactor * static_cast<double>(index.capacity()));
    for (const auto& [key, id] : oracle) {
      const uint64_t h = hash_of_id[id];
      const int64_t pos = index.Find(h, key, KeyOf());
      CHECK(pos >= 0);
      CHECK_EQ(index.IdAt(pos), id);
      CHECK_EQ(index.FindOrEmpty(h, key, KeyOf()), pos);
      const int64_t c = index.Candidate(h);
      CHECK(c >= 0);
      CHECK_EQ(TaggedIndex::Tag(hash_of_id[index.IdAt(c)]), TaggedIndex::Tag(h));
    }
  }
};

// Random inserts, finds and erases over `universe` keys, checked against the oracle.
template <typename Hash>
void RandomOps(uint64_t seed, int64_t universe, int ops, const Hash& hash) {
  Model m;
  std::mt19937_64 rng(seed);
  for (int op = 0; op < ops; ++op) {
    const int64_t key = static_cast<int64_t>(rng() % universe) - universe / 2;
    const uint64_t h = hash(key);
    const bool present = m.oracle.count(key) > 0;
    const int64_t pos = m.index.Find(h, key, m.KeyOf());
    CHECK_EQ(pos >= 0, present);
    if (present) CHECK_EQ(m.index.IdAt(pos), m.oracle[key]);
    if (!present) CHECK(m.index.EmptyAt(m.index.FindOrEmpty(h, key, m.KeyOf())));
    // Insert while the universe is filling, then insert and erase alike.
    if (present ? rng() % 3 == 0 : rng() % 4 != 0) {
      if (present) m.Erase(key, h);
      else m.Insert(key, h);
    }
    if (op % 97 == 0) m.CheckAll();
  }
  m.CheckAll();
  // Erase everything: the index ends empty, every probe of an absent key stops at once.
  std::vector<int64_t> keys;
  for (const auto& [key, id] : m.oracle) keys.push_back(key);
  for (int64_t key : keys) m.Erase(key, hash(key));
  CHECK_EQ(m.index.size(), 0);
  for (int64_t key : keys) CHECK_EQ(m.index.Find(hash(key), key, m.KeyOf()), -1);
}

}  // namespace

TEST(Index, TaggedIndexMatchesAMapWithRealHashes) {
  RandomOps(1, 4000, 30000, [](int64_t key) { return HashKey(key); });
}

TEST(Index, TaggedIndexMatchesAMapWhenTagsCollide) {
  // Two tags for all keys: almost every probe meets a tag match that is another key.
  RandomOps(2, 600, 8000, [](int64_t key) {
    const uint64_t h = HashKey(key);
    return (h & 0xffffffffULL) | (static_cast<uint64_t>(key & 1) << 32);
  });
}

TEST(Index, TaggedIndexWrapsProbeChainsAroundTheEnd) {
  // Every home is the last slot (the low 32 bits near 2^32): chains wrap to slot 0 and on, and
  // an erase shifts entries back across the end.
  RandomOps(3, 200, 6000, [](int64_t key) {
    const uint64_t low = 0xffffffffULL - static_cast<uint64_t>(key & 3);
    return low | (static_cast<uint64_t>(key & 7) << 32);
  });
}

TEST(Index, TaggedIndexSlotFieldsAndGrowth) {
  const uint64_t h = (uint64_t{0x55} << 32) | 0x80000000ULL;
  const TaggedIndex::Slot e = TaggedIndex::MakeSlot(h, 12345);
  CHECK(e != 0);
  CHECK_EQ(TaggedIndex::IdOf(e), 12345u);
  CHECK(TaggedIndex::TagMatches(e, h));
  CHECK(!TaggedIndex::TagMatches(e, h ^ (uint64_t{1} << 32)));
  CHECK_EQ(TaggedIndex::IdOf(TaggedIndex::MakeSlot(h, static_cast<uint32_t>(kMaxRowsPerShard - 1))),
           static_cast<uint32_t>(kMaxRowsPerShard - 1));
  CHECK_EQ(TaggedIndex::Home(0x80000000ULL, 16), 8);
  CHECK_EQ(TaggedIndex::Home(0xffffffffULL, 25), 24);
  TaggedIndex index;
  CHECK_EQ(static_cast<int64_t>(index.capacity()), kShardInitialCapacity);
  CHECK_EQ(index.bytes(), kShardInitialCapacity * 4);
  // Room for 12 fits 16 slots at 0.8; 13 grows by kIndexGrowth (and calls back for entries).
  int calls = 0;
  index.Reserve(12, [&](const auto&) { ++calls; });
  CHECK_EQ(calls, 0);
  index.Reserve(13, [&](const auto&) { ++calls; });
  CHECK_EQ(calls, 1);
  CHECK_EQ(index.capacity(), static_cast<size_t>(16 * kIndexGrowth) + 1);
  TaggedIndex other;
  other.Insert(h, 7);
  index.Swap(other);
  CHECK_EQ(index.size(), 1);
  CHECK_EQ(other.size(), 0);
  CHECK_EQ(index.Find(h, 99, [](uint32_t) { return int64_t{99}; }), TaggedIndex::Home(h, index.capacity()));
}
