// Unit tests of the thread budget of the parallel helpers (parallel.h): within WithThreads(n),
// a batch is split into at most n pieces and runs on at most n threads, whatever the machine.
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/core/config.h"
#include "kernels/core/parallel.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

// The threads that ran fn's chunks of a batch far above the parallel threshold, with every
// chunk seen exactly once.
std::set<std::thread::id> ThreadsOfABatch() {
  const int64_t n = 16 * kParallelThreshold;
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<int> seen(n, 0);
  ParallelRange(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ++seen[i];
    volatile double sink = 0;   // long enough that every thread of the budget gets a chunk
    for (int64_t i = 0; i < (end - begin) * 200; ++i) sink = sink + 1.0;
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
  });
  for (int v : seen) CHECK_EQ(v, 1);
  return threads;
}

}  // namespace

TEST(Parallel, WithOneThreadABatchRunsOnTheCallingThreadInOnePiece) {
  WithThreads(1, [] {
    CHECK_EQ(ParallelParts(), 1);
    const std::set<std::thread::id> threads = ThreadsOfABatch();
    CHECK_EQ(threads.size(), 1u);
    CHECK(*threads.begin() == std::this_thread::get_id());
    int ran = 0;
    ParallelTasks(8, [&](int) { ++ran; });   // no second thread: no race on `ran`
    CHECK_EQ(ran, 8);
  });
}

TEST(Parallel, WithTwoThreadsABatchSplitsInTwoPieces) {
  // A budget of 2 is 2 pieces whatever the machine (the threads it runs on are at most 2).
  WithThreads(2, [] {
    CHECK_EQ(ParallelParts(), 2);
    CHECK(ThreadsOfABatch().size() <= 2u);
    std::mutex mu;
    std::set<std::thread::id> threads;
    ParallelTasks(8, [&](int) {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    CHECK(threads.size() <= 2u);
  });
  // Nested budgets: the inner, smaller one holds; back outside, the outer one again.
  WithThreads(2, [] {
    WithThreads(1, [] { CHECK_EQ(ParallelParts(), 1); });
    CHECK_EQ(ParallelParts(), 2);
  });
}

TEST(Parallel, WithoutABudgetPartsStayInTheirBounds) {
  // Without a budget the machine decides (oneTBB: the CPUs the process's affinity allows).
  CHECK(ParallelParts() >= 1 && ParallelParts() <= kMaxParallelParts);
}
