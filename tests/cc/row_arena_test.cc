// Unit tests of RowArena (row_arena.h) against a model of its ids: a set of live ids and a
// stack of freed ones.
#include <unistd.h>

#include <cstdint>
#include <iterator>
#include <random>
#include <set>
#include <vector>

#include "kernels/core/row_arena.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(RowArena, ArenaRecyclesFreedRowsAndKeepsIdsAcrossGrowth) {
  RowArena arena(6);
  std::vector<uint32_t> ids(5000);
  arena.Allocate(10, ids.data());
  for (uint32_t i = 0; i < 10; ++i) CHECK_EQ(ids[i], i);
  for (uint32_t i = 0; i < 10; ++i) arena.Row(ids[i])[5] = static_cast<float>(i);
  arena.Allocate(4990, ids.data() + 10);  // grows the mapping (it may move): ids keep their rows
  for (uint32_t i = 0; i < 10; ++i) CHECK(arena.Row(i)[5] == static_cast<float>(i));
  CHECK_EQ(arena.rows_in_use(), 5000);
  CHECK_EQ(arena.end(), 5000u);
  const int64_t reserved = arena.bytes_reserved();
  const int64_t page = sysconf(_SC_PAGESIZE);
  CHECK(reserved >= 5000 * 6 * 4 && reserved <= 5000 * 6 * 4 + page + 1024);  // touched pages, live bits
  arena.Free(7);
  arena.Free(3);
  CHECK(!arena.Live(7) && !arena.Live(3) && arena.Live(4));
  uint32_t again[3];
  arena.Allocate(3, again);  // the freed ids first (last freed first), then a new one
  CHECK_EQ(again[0], 3u);
  CHECK_EQ(again[1], 7u);
  CHECK_EQ(again[2], 5000u);
  CHECK(arena.Live(3) && arena.Live(7));
  CHECK_EQ(arena.rows_in_use(), 5001);
}

TEST(RowArena, ArenaMatchesAModelOfItsIds) {
  // Random allocations and frees: ids come from the freed stack (last freed first), then new
  // ones in order; every live row keeps what was written to it through growth and recycling.
  RowArena arena(5);
  std::mt19937_64 rng(11);
  std::set<uint32_t> live;
  std::vector<uint32_t> freed;
  uint32_t next = 0;
  std::vector<uint32_t> ids;
  for (int op = 0; op < 3000; ++op) {
    if (live.empty() || rng() % 3 != 0) {
      const int64_t k = static_cast<int64_t>(rng() % 40);
      ids.resize(k);
      arena.Allocate(k, ids.data());
      for (int64_t i = 0; i < k; ++i) {
        uint32_t want;
        if (!freed.empty()) {
          want = freed.back();
          freed.pop_back();
        } else {
          want = next++;
        }
        CHECK_EQ(ids[i], want);
        live.insert(want);
        for (int j = 0; j < 5; ++j) arena.Row(want)[j] = static_cast<float>(want * 5 + j);
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      arena.Free(*it);
      freed.push_back(*it);
      live.erase(it);
    }
    CHECK_EQ(arena.rows_in_use(), static_cast<int64_t>(live.size()));
    CHECK_EQ(arena.end(), next);
  }
  for (uint32_t id = 0; id < arena.end(); ++id) {
    CHECK_EQ(arena.Live(id), live.count(id) > 0);
    if (!arena.Live(id)) continue;
    for (int j = 0; j < 5; ++j) CHECK(arena.Row(id)[j] == static_cast<float>(id * 5 + j));
  }
  CHECK_EQ(arena.stride(), 5);
}
