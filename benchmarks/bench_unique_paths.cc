// The paths of core::UniqueWithCounts on Zipf(1.2) and uniform ids of several sizes;
// their crossovers set kSortPathMaxN, kParallelUniqueMinN and kIdSetSizeDivisor (config.h).
// Prints the best of 15 runs in ns per id.
#include <algorithm>
#include <utility>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/core/unique.h"

using namespace tfps::core;

// The measured alternative that lost: sort (id, position) pairs, no hash table.
static void UniqueBySort(const int64_t* ids, int64_t n, int32_t* inverse, std::vector<int64_t>* uniq,
                  std::vector<int32_t>* counts) {
  std::vector<std::pair<int64_t, int32_t>> sorted(n);
  for (int64_t i = 0; i < n; ++i) sorted[i] = {ids[i], static_cast<int32_t>(i)};
  std::sort(sorted.begin(), sorted.end());  // by id, then position: a group starts at its first occurrence
  // first[g] = (first position, group start) of each distinct id, ordered by first position.
  std::vector<std::pair<int32_t, int32_t>> first;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || sorted[i].first != sorted[i - 1].first) first.push_back({sorted[i].second, static_cast<int32_t>(i)});
  }
  std::sort(first.begin(), first.end());
  uniq->resize(first.size());
  counts->resize(first.size());
  for (size_t u = 0; u < first.size(); ++u) {
    const int32_t start = first[u].second;
    int32_t end = start;
    while (end < n && sorted[end].first == sorted[start].first) inverse[sorted[end++].second] = static_cast<int32_t>(u);
    (*uniq)[u] = sorted[start].first;
    (*counts)[u] = end - start;
  }
}

template <typename F>
double BestNsPerId(int64_t n, F f) {
  double best = 1e30;
  for (int r = 0; r < 15; ++r) {
    auto t = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count());
  }
  return best / std::max<int64_t>(n, 1);
}

int main() {
  std::mt19937_64 rng(0);
  std::uniform_real_distribution<double> u(0, 1);
  std::printf("%-8s %9s %8s %8s %8s %8s %8s\n", "ids", "n", "sort", "hash/1", "hash/2", "par/1", "par/2");
  for (const char* dist : {"zipf", "uniform"}) {
    for (int64_t n : {16, 64, 256, 1024, 4096, 16384, 65536, 131072, 1048576}) {
      std::vector<int64_t> ids(n);
      for (auto& x : ids) {
        x = dist[0] == 'z' ? static_cast<int64_t>(std::floor(std::pow(1 - u(rng), -1.0 / 0.2))) * 7919
                           : static_cast<int64_t>(rng() >> 1);
      }
      std::vector<int32_t> inv(n);
      std::vector<int64_t> uniq;
      std::vector<int32_t> counts;
      const double sort = n <= 131072 ? BestNsPerId(n, [&] { UniqueBySort(ids.data(), n, inv.data(), &uniq, &counts); }) : -1;
      const double h1 = BestNsPerId(n, [&] { UniqueByHash(ids.data(), n, inv.data(), &uniq, &counts, 1); });
      const double h2 = BestNsPerId(n, [&] { UniqueByHash(ids.data(), n, inv.data(), &uniq, &counts, 2); });
      const double p1 = BestNsPerId(n, [&] { UniqueByParallelHash(ids.data(), n, inv.data(), &uniq, &counts, 1); });
      const double p2 = BestNsPerId(n, [&] { UniqueByParallelHash(ids.data(), n, inv.data(), &uniq, &counts, 2); });
      std::printf("%-8s %9lld %8.1f %8.1f %8.1f %8.1f %8.1f   (%zu unique)\n", dist, static_cast<long long>(n), sort,
                  h1, h2, p1, p2, uniq.size());
    }
  }
  return 0;
}
