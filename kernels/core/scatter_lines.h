// Writing large outputs that are written once: a cache-line buffer per destination run for a
// scatter (ScatterLines), 64-byte aligned arrays (LineAligned), and a row copy that bypasses the
// cache (StoreRowOnce).
//
// Streaming (non-temporal) stores write a whole cache line without reading it first and leave
// it out of the cache: a gain for outputs larger than the cache that are not read back soon, a
// loss for smaller ones, which the next reader would find in cache (config.h: kStreamMinBytes).
// Under AddressSanitizer and ThreadSanitizer the same code uses plain stores, which the
// sanitizers see (they do not instrument the streaming intrinsics); only the instruction differs.
// Not thread-safe: each thread uses its own ScatterLines; StoreRowOnce and LineAligned hold no
// shared state. After streaming stores, a thread calls _mm_sfence() before others read.
#ifndef TFPS_KERNELS_CORE_SCATTER_LINES_H_
#define TFPS_KERNELS_CORE_SCATTER_LINES_H_

#include <immintrin.h>

#include <cstdint>
#include <memory>

#include "kernels/core/prefetch.h"

namespace tfps {
namespace core {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// 8-byte values per cache line.
constexpr int64_t kPerLine = static_cast<int64_t>(kCacheLine / sizeof(int64_t));

// n values of T (8 bytes each) from a cache-line boundary, uninitialized.
template <typename T>
class LineAligned {
 public:
  static_assert(sizeof(T) == sizeof(int64_t), "LineAligned holds 8-byte values");
  explicit LineAligned(int64_t n) : mem_(new T[n + kPerLine]) {
    const uintptr_t at = (reinterpret_cast<uintptr_t>(mem_.get()) + kCacheLine - 1) & ~(kCacheLine - 1);
    data_ = reinterpret_cast<T*>(at);
  }
  T* get() const { return data_; }

 private:
  std::unique_ptr<T[]> mem_;
  T* data_;
};

// Copies dim floats (a multiple of 4; dst 16-byte aligned) with streaming stores.
inline void StoreRowOnce(float* dst, const float* src, int64_t dim) {
  for (int64_t c = 0; c < dim; c += 4) {
    const __m128 v = _mm_loadu_ps(src + c);
    if (kSanitized) _mm_store_ps(dst + c, v);
    else _mm_stream_ps(dst + c, v);
  }
}

// Scatters (position, hash) pairs into kRuns runs of two arrays (idx_out, h_out: cache-line
// aligned), run r's next value going to next[r]++, through a buffer of one cache line of each
// per run (software write-combining): a line is written out once this buffer has filled all of
// it, so the scatter keeps 2 * kRuns lines in L1 instead of 2 * kRuns write streams open to
// memory (the plain scatter of 2^20 keys into 64 shards stalled on 65% of its stores). Full
// lines go out with streaming stores. A line this buffer only partly fills (a run's first and
// last, or one shared with other runs or with another ScatterLines' runs) is written value by
// value, so runs never overwrite each other. Flush() writes what is left.
template <int kRuns>
class ScatterLines {
 public:
  ScatterLines(int64_t* next, int64_t* idx_out, uint64_t* h_out) : next_(next), idx_out_(idx_out), h_out_(h_out) {}

  void Put(int run, int64_t i, uint64_t h) {
    const int64_t to = next_[run]++;
    const int64_t k = to & (kPerLine - 1);
    if (count_[run] == 0) first_[run] = k;
    idx_[run][k] = static_cast<uint64_t>(i);
    h_[run][k] = h;
    ++count_[run];
    if (k == kPerLine - 1) WriteOut(run, to - k);
  }
  void Flush() {
    for (int run = 0; run < kRuns; ++run) {
      if (count_[run] > 0) WriteOut(run, (next_[run] - 1) & ~(kPerLine - 1));
    }
    _mm_sfence();
  }

 private:
  // Writes the run's buffered slots [first, first + count) of the line that starts at `line`.
  void WriteOut(int run, int64_t line) {
    if (count_[run] == kPerLine) {
      StoreLine(reinterpret_cast<uint64_t*>(idx_out_ + line), idx_[run]);
      StoreLine(h_out_ + line, h_[run]);
    } else {
      for (int64_t k = first_[run]; k < first_[run] + count_[run]; ++k) {
        idx_out_[line + k] = static_cast<int64_t>(idx_[run][k]);
        h_out_[line + k] = h_[run][k];
      }
    }
    count_[run] = 0;
  }
  static void StoreLine(uint64_t* dst, const uint64_t* src) {
    for (int64_t k = 0; k < kPerLine; k += 2) {
      const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(src + k));
      if (kSanitized) _mm_store_si128(reinterpret_cast<__m128i*>(dst + k), v);
      else _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), v);
    }
  }

  int64_t* next_;
  int64_t* idx_out_;
  uint64_t* h_out_;
  alignas(kCacheLine) uint64_t idx_[kRuns][kPerLine];
  alignas(kCacheLine) uint64_t h_[kRuns][kPerLine];
  int64_t first_[kRuns] = {};
  int64_t count_[kRuns] = {};
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_SCATTER_LINES_H_
