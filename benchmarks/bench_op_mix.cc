// Op-mix throughput of core::EmbeddingTable against a std::unordered_map under one mutex (rows
// from new[], the same operations), in one run: lookup-insert of owned and fresh keys, sparse
// update, remove in large and small batches, evict and stats, from every hardware thread.
// Row allocation and release are on the hot path of the fresh keys, so this is where a row
// pool's lock shows. Prints keys touched per second (median of 5 runs) and the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/core/embedding_table.h"

using namespace tfps::core;

namespace {

constexpr int64_t kDim = 16;
constexpr int64_t kOwned = 100000, kFresh = 50000, kSmall = 2048;
constexpr int kRounds = 40;

struct TfpsTable {
  EmbeddingTable t{kDim, InitSpec()};
  TfpsTable() {
    const float zero = 0.f;
    std::string error;
    t.EnsureSlots(1, &zero, &error);
  }
  void Lookup(const int64_t* k, int64_t n, float* out) { t.Lookup(k, n, true, false, out); }
  void Update(const int64_t* k, int64_t n, int64_t step) {
    t.Update(k, n, step, [](int64_t, float* row, uint32_t) {
      for (int64_t j = 0; j < 2 * kDim; ++j) row[j] += 1.f;
    });
  }
  void Remove(const int64_t* k, int64_t n) { t.Remove(k, n); }
  void Evict(int64_t step) {
    IdleRows old(1000);
    t.Evict({&old}, step);
    t.Stats();
  }
};

// The baseline: one mutex around an unordered_map of rows [value | slot | last_step].
struct MutexTable {
  std::mutex mu;
  std::unordered_map<int64_t, float*> rows;
  ~MutexTable() {
    for (auto& [k, row] : rows) delete[] row;
  }
  void Lookup(const int64_t* k, int64_t n, float* out) {
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t i = 0; i < n; ++i) {
      float*& row = rows[k[i]];
      if (row == nullptr) row = new float[2 * kDim + 1]();
      std::memcpy(out + i * kDim, row, sizeof(float) * kDim);
    }
  }
  void Update(const int64_t* k, int64_t n, int64_t step) {
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t i = 0; i < n; ++i) {
      auto it = rows.find(k[i]);
      if (it == rows.end()) continue;
      for (int64_t j = 0; j < 2 * kDim; ++j) it->second[j] += 1.f;
      it->second[2 * kDim] = static_cast<float>(step);
    }
  }
  void Remove(const int64_t* k, int64_t n) {
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t i = 0; i < n; ++i) {
      auto it = rows.find(k[i]);
      if (it == rows.end()) continue;
      delete[] it->second;
      rows.erase(it);
    }
  }
  void Evict(int64_t step) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = rows.begin(); it != rows.end();) {
      if (step - it->second[2 * kDim] > 1000) {
        delete[] it->second;
        it = rows.erase(it);
      } else {
        ++it;
      }
    }
  }
};

template <typename Table>
double RunOnce(int threads) {
  Table t;
  auto worker = [&](int w) {
    std::vector<int64_t> owned(kOwned), fresh(kFresh);
    for (int64_t k = 0; k < kOwned; ++k) owned[k] = (k * threads + w) * 7919;
    std::vector<float> out(kOwned * kDim);
    for (int r = 0; r < kRounds; ++r) {
      t.Lookup(owned.data(), kOwned, out.data());
      t.Update(owned.data(), kOwned, r);
      for (int64_t k = 0; k < kFresh; ++k) fresh[k] = (int64_t{1} << 40) + ((r * threads + w) * kFresh + k) * 13;
      t.Lookup(fresh.data(), kFresh, out.data());
      t.Remove(fresh.data(), kFresh / 2);
      for (int64_t b = kFresh / 2; b < kFresh; b += kSmall) t.Remove(fresh.data() + b, std::min(kSmall, kFresh - b));
      if (r % 10 == w % 10) t.Evict(r);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) pool.emplace_back(worker, w);
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(threads) * kRounds * (2 * kOwned + 2 * kFresh) / secs;
}

template <typename Table>
double Median(int threads) {
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) rates.push_back(RunOnce<Table>(threads));
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

}  // namespace

int main() {
  const int threads = std::max(2u, std::thread::hardware_concurrency());
  const double tfps = Median<TfpsTable>(threads), base = Median<MutexTable>(threads);
  std::printf("op mix (lookup-insert, update, remove, evict, stats), %d threads: tfps %.2f M keys/s, "
              "unordered_map+mutex %.2f M keys/s, ratio %.2fx\n", threads, tfps / 1e6, base / 1e6, tfps / base);
  return 0;
}
