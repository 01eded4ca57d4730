#include "kernels/core/parallel.h"

#include <algorithm>
#include <thread>

#include "kernels/core/config.h"

#ifdef TFPS_STD_THREAD_FORK_JOIN
#include <algorithm>
#include <thread>
#include <vector>
#else
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#endif

namespace tfps {
namespace core {

int ParallelParts() {
  static const int parts = [] {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    return std::max(2, std::min(hw, kMaxParallelParts));
  }();
  return parts;
}

void ParallelRange(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_parallel) {
  if (n < (min_parallel < 0 ? kParallelThreshold : min_parallel)) {
    if (n > 0) fn(0, n);
    return;
  }
#ifdef TFPS_STD_THREAD_FORK_JOIN
  const int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  ParallelTasks(static_cast<int>(std::min<int64_t>(chunks, 4)), [&](int t) {
    for (int64_t c = t; c < chunks; c += std::min<int64_t>(chunks, 4)) {
      fn(c * kParallelGrain, std::min(n, (c + 1) * kParallelGrain));
    }
  });
#else
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kParallelGrain),
                    [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
#endif
}

void ParallelTasks(int k, const std::function<void(int)>& fn) {
#ifdef TFPS_STD_THREAD_FORK_JOIN
  std::vector<std::thread> threads;
  for (int t = 1; t < k; ++t) threads.emplace_back(fn, t);
  if (k > 0) fn(0);
  for (auto& th : threads) th.join();
#else
  tbb::parallel_for(0, k, [&](int t) { fn(t); });
#endif
}

void ParallelPieces(int64_t n, int parts, const std::function<void(int, int64_t, int64_t)>& fn) {
  const int64_t piece = (n + parts - 1) / parts;
  auto run = [&](int p) { fn(p, std::min(n, p * piece), std::min(n, (p + 1) * piece)); };
  if (parts == 1) run(0);
  else ParallelTasks(parts, run);
}

}  // namespace core
}  // namespace tfps
