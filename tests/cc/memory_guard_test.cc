// Unit tests of the memory guard (memory_guard.h) against the machine's own /proc/meminfo.
#include <cstdint>
#include <cstdio>
#include <new>
#include <vector>

#include "kernels/core/memory_guard.h"
#include "kernels/core/row_arena.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {
int64_t MemTotalBytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  long long kib = -1;
  if (f != nullptr) {
    if (std::fscanf(f, "MemTotal: %lld kB", &kib) != 1) kib = -1;
    std::fclose(f);
  }
  return kib * 1024;
}
}  // namespace

TEST(MemoryGuard, MemoryBeyondTheMachineIsRefusedAndSmallGrantsPass) {
  const int64_t total = MemTotalBytes();
  CHECK(total > 0);
  CHECK(!MemoryAvailableFor(total));       // all of it: never (the reserve stays free)
  CHECK(MemoryAvailableFor(int64_t{1} << 20));   // a MiB: yes
  CHECK(MemoryAvailableFor(0));
}

TEST(MemoryGuard, AnArenaRefusesRowsTheMachineHasNotGotAndStaysAsItWas) {
  // Rows of 2^22 floats (16 MiB each): as many as the machine's whole memory would hold.
  const int64_t stride = int64_t{1} << 22;
  const int64_t rows = MemTotalBytes() / (stride * 4) + 1;
  RowArena arena(stride);
  std::vector<uint32_t> ids(static_cast<size_t>(rows));
  arena.Allocate(2, ids.data());
  bool refused = false;
  try {
    arena.Allocate(rows, ids.data());
  } catch (const std::bad_alloc&) {
    refused = true;
  }
  CHECK(refused);
  CHECK_EQ(arena.rows_in_use(), 2);   // nothing of the refused call
  arena.Allocate(1, ids.data());      // and it goes on
  CHECK_EQ(arena.rows_in_use(), 3);
}
