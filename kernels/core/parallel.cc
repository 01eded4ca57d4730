#include "kernels/core/parallel.h"

#include <algorithm>
#include <thread>

#include "kernels/core/config.h"

#ifdef TFPS_STD_THREAD_FORK_JOIN
#include <algorithm>
#include <thread>
#include <vector>
#else
#include <map>
#include <memory>
#include <mutex>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#endif

namespace tfps {
namespace core {

namespace {

#ifdef TFPS_STD_THREAD_FORK_JOIN
thread_local int thread_budget = 0;   // WithThreads' bound on this thread (0: none)

int Budget() {
  return thread_budget > 0 ? thread_budget : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Sets this thread's budget for its scope (restored on the way out, an exception's too).
class BudgetScope {
 public:
  explicit BudgetScope(int threads) : saved_(thread_budget) { thread_budget = threads; }
  ~BudgetScope() { thread_budget = saved_; }

 private:
  const int saved_;
};
#else
int Budget() { return tbb::this_task_arena::max_concurrency(); }
#endif

}  // namespace

int ParallelParts() { return std::max(1, std::min(Budget(), kMaxParallelParts)); }

void WithThreads(int threads, const std::function<void()>& fn) {
  if (threads <= 0) {
    fn();
    return;
  }
#ifdef TFPS_STD_THREAD_FORK_JOIN
  BudgetScope scope(threads);
  fn();
#else
  static std::mutex mu;
  static std::map<int, std::unique_ptr<tbb::task_arena>>* arenas = new std::map<int, std::unique_ptr<tbb::task_arena>>;
  tbb::task_arena* arena;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::unique_ptr<tbb::task_arena>& a = (*arenas)[threads];
    if (a == nullptr) a = std::make_unique<tbb::task_arena>(threads);
    arena = a.get();
  }
  // Isolated: a thread waiting inside fn (for its parallel loop) runs only fn's own tasks, never
  // another caller's work queued on the arena (a call that found every slot taken), which may
  // wait for a lock this thread holds.
  auto isolated = [&fn] { tbb::this_task_arena::isolate(fn); };
  if (tbb::this_task_arena::current_thread_index() != tbb::task_arena::not_initialized &&
      Budget() <= threads) {
    isolated();   // already within a budget at most this one
    return;
  }
  arena->execute(isolated);
#endif
}

void ParallelRange(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_parallel) {
  if (n < (min_parallel < 0 ? kParallelThreshold : min_parallel)) {
    if (n > 0) fn(0, n);
    return;
  }
#ifdef TFPS_STD_THREAD_FORK_JOIN
  const int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  const int64_t threads = std::min<int64_t>(chunks, std::min(4, Budget()));
  ParallelTasks(static_cast<int>(threads), [&](int t) {
    for (int64_t c = t; c < chunks; c += threads) {
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
  // At most Budget() threads, the caller's included: task t runs on thread t mod that.
  const int workers = std::min(k, Budget());
  const int budget = thread_budget;   // the spawned threads keep the caller's budget
  auto run = [&fn, k, workers](int w) {
    for (int t = w; t < k; t += workers) fn(t);
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) {
    threads.emplace_back([&run, w, budget] {
      BudgetScope scope(budget);
      run(w);
    });
  }
  if (workers > 0) run(0);
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
