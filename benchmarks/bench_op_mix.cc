// Op-mix throughput of core::EmbeddingTable: the stress test's mix (lookup-insert of owned and
// fresh keys, sparse update, remove, evict, export, stats), timed, 2 threads, no checks.
// Row allocation and release are on the hot path of the fresh keys, so this is where the row
// pool's lock shows. Prints keys touched per second (median of 5 runs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "kernels/core/embedding_table.h"

using namespace tfps::core;

namespace {

constexpr int64_t kDim = 16;
constexpr int kThreads = 2;
constexpr int64_t kOwned = 100000, kFresh = 50000, kSmall = 2048;
constexpr int kRounds = 40;

double RunOnce() {
  InitSpec spec;
  EmbeddingTable t(kDim, spec);
  const float zero = 0.f;
  std::string error;
  t.EnsureSlots(1, &zero, &error);
  auto worker = [&](int w) {
    std::vector<int64_t> owned(kOwned), fresh(kFresh);
    for (int64_t k = 0; k < kOwned; ++k) owned[k] = (k * kThreads + w) * 7919;
    std::vector<float> out(kOwned * kDim);
    for (int r = 0; r < kRounds; ++r) {
      t.Lookup(owned.data(), kOwned, true, false, out.data());
      t.Update(owned.data(), kOwned, r, [](int64_t, float* row, uint32_t) {
        for (int64_t j = 0; j < 2 * kDim; ++j) row[j] += 1.f;
      });
      for (int64_t k = 0; k < kFresh; ++k) fresh[k] = (int64_t{1} << 40) + ((r * kThreads + w) * kFresh + k) * 13;
      t.Lookup(fresh.data(), kFresh, true, false, out.data());
      t.Remove(fresh.data(), kFresh / 2);
      // Small batches: the serial path, one pool call per shard visit.
      for (int64_t b = kFresh / 2; b < kFresh; b += kSmall) {
        t.Remove(fresh.data() + b, std::min(kSmall, kFresh - b));
      }
      if (r % 10 == w) {
        EvictPolicy old;
        old.after_steps = 1000;
        t.Evict(old, r);
        t.Stats();
      }
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) threads.emplace_back(worker, w);
  for (auto& th : threads) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double keys = double(kThreads) * kRounds * (2 * kOwned + 2 * kFresh);
  return keys / secs;
}

}  // namespace

int main() {
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) rates.push_back(RunOnce());
  std::sort(rates.begin(), rates.end());
  std::printf("op mix (lookup-insert, update, remove, evict, stats), %d threads: %.2f M keys/s (median of 5)\n",
              kThreads, rates[2] / 1e6);
  return 0;
}
