// Unit tests of row gather and scatter-add (gather.h) and of the line-buffered scatter
// (scatter_lines.h), against plain loops.
#include <cstring>
#include <vector>

#include "kernels/core/gather.h"
#include "kernels/core/scatter_lines.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(Gather, ScatterLinesMatchesAPlainScatterForEveryRunShape) {
  // Runs of every start offset within a line and every length 0..17 (shorter than a line, one
  // line, spanning several; a line shared by up to all three runs and by two scatterers, as the
  // pieces of a batch are): the arrays equal a plain scatter's, and nothing outside the runs is
  // written.
  constexpr int kRuns = 3;
  for (int64_t start = 0; start < kPerLine; ++start) {
    for (int64_t len = 0; len <= 17; ++len) {
      const int64_t total = start + 2 * kRuns * len + kPerLine;
      LineAligned<int64_t> idx(total);
      LineAligned<uint64_t> h(total);
      std::vector<int64_t> want_idx(total, -1);
      std::vector<uint64_t> want_h(total, ~uint64_t{0});
      std::fill(idx.get(), idx.get() + total, -1);
      std::fill(h.get(), h.get() + total, ~uint64_t{0});
      // Two scatterers (pieces), each with kRuns runs; piece 1's run r right after piece 0's.
      int64_t next[2][kRuns];
      for (int r = 0; r < kRuns; ++r) {
        next[0][r] = start + 2 * r * len;
        next[1][r] = start + (2 * r + 1) * len;
      }
      int64_t plain[2][kRuns];
      std::memcpy(plain, next, sizeof(next));
      ScatterLines<kRuns> a(next[0], idx.get(), h.get()), b(next[1], idx.get(), h.get());
      int64_t i = 0;
      for (int64_t k = 0; k < len; ++k) {
        for (int r = 0; r < kRuns; ++r) {
          for (int piece = 0; piece < 2; ++piece, ++i) {
            (piece == 0 ? a : b).Put(r, i, static_cast<uint64_t>(i) * 7919u);
            const int64_t to = plain[piece][r]++;
            want_idx[to] = i;
            want_h[to] = static_cast<uint64_t>(i) * 7919u;
          }
        }
      }
      a.Flush();
      b.Flush();
      for (int64_t t = 0; t < total; ++t) CHECK(idx.get()[t] == want_idx[t] && h.get()[t] == want_h[t]);
    }
  }
}

TEST(Gather, GatherRowsMatchesLoop) {
  for (int64_t dim : {16, 3}) {
    std::vector<float> params(100 * dim);
    for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i);
    std::vector<int32_t> idx(50000);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>((i * 37) % 100);
    std::vector<float, std::allocator<float>> out(idx.size() * dim + 4);
    float* aligned = out.data();
    GatherRows(params.data(), dim, idx.data(), static_cast<int64_t>(idx.size()), aligned);
    for (size_t i = 0; i < idx.size(); ++i) {
      for (int64_t j = 0; j < dim; ++j) CHECK(aligned[i * dim + j] == params[idx[i] * dim + j]);
    }
    CHECK_EQ(CheckIndices(idx.data(), 50000, 100), -1);
    idx[77] = 100;
    CHECK_EQ(CheckIndices(idx.data(), 50000, 100), 77);
  }
}

TEST(Gather, ScatterAddRowsIsTheAdjointOfGather) {
  for (int64_t n : {10, 100000}) {
    const int64_t dim = 5, rows = 37;
    std::vector<float> data(n * dim);
    std::vector<int32_t> idx(n);
    for (int64_t i = 0; i < n; ++i) {
      idx[i] = static_cast<int32_t>((i * 7) % rows);
      for (int64_t j = 0; j < dim; ++j) data[i * dim + j] = static_cast<float>((i + j) % 3);
    }
    std::vector<float> out(rows * dim, 123.f), want(rows * dim, 0.f);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < dim; ++j) want[idx[i] * dim + j] += data[i * dim + j];
    }
    // Scratch filled with garbage: every buffer must be cleared before it is summed into.
    std::vector<float> scratch(ScatterAddScratch(n, rows, dim), -7.f);
    CHECK_EQ(scratch.empty(), n < kParallelThreshold);
    ScatterAddRows(data.data(), dim, idx.data(), n, rows, out.data(), scratch.data());
    CHECK(out == want);  // small integers: exact in any summation order
  }
}
