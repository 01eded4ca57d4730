// Fork/join helpers over tbb::parallel_for.
//
// Under ThreadSanitizer (TFPS_STD_THREAD_FORK_JOIN, set by the TSan test build)
// the same splits run on std::thread instead: Debian's libtbb is not
// instrumented, so TSan cannot see its join and reports false races on
// everything the caller touches afterwards. The table's own locks (tbb spin
// mutexes are header-only) stay under TSan either way.
#ifndef TFPS_KERNELS_CORE_PARALLEL_H_
#define TFPS_KERNELS_CORE_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace tfps {
namespace core {

// Runs fn(begin, end) over [0, n): one call when n < min_parallel (default
// kParallelThreshold), else chunks of kParallelGrain spread over threads.
void ParallelRange(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_parallel = -1);

// How many pieces a large batch is split into: the threads the calling code may use (its
// WithThreads budget, else the machine's hardware threads as TBB sees them), clamped to
// [1, kMaxParallelParts].
int ParallelParts();

// Runs fn() with at most `threads` threads for every parallel helper it calls, the calling
// thread included: inside a tbb::task_arena of that concurrency (one per size, shared by every
// caller of that size, so that concurrent callers share the budget). threads <= 0: no bound.
// The op kernels run the table's work this way, with the session's thread budget
// (kernels/session_threads.h).
void WithThreads(int threads, const std::function<void()>& fn);

// Runs fn(0) ... fn(k - 1), in parallel.
void ParallelTasks(int k, const std::function<void(int)>& fn);
// Splits [0, n) into `parts` consecutive pieces of ceil(n / parts) (the last ones may be shorter
// or empty) and runs fn(p, begin, end) for each, in parallel (in the calling thread for 1 part).
void ParallelPieces(int64_t n, int parts, const std::function<void(int, int64_t, int64_t)>& fn);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_PARALLEL_H_
