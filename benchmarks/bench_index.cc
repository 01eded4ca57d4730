// Index benchmark: the same operation mix on three key -> row indexes, 2 threads.
//   tfps      core::EmbeddingTable (sharded open addressing under tbb spin_rw_mutex, rows in per-shard arenas)
//   tbb_chm   tbb::concurrent_hash_map<int64, float*> + rows from new[]
//   std_mutex std::unordered_map<int64, float*> under one std::mutex + rows from new[]
// Ops: insert 1M distinct keys (rows initialised to zeros, dim 16); then look up 4M Zipf(1.2)
// keys copying rows out, in batches of 64k unique keys (2 threads, split by halves).
// Prints M ops/s per index, the ratio tfps / other, and resident bytes per key (each index
// runs in its own forked process; RSS growth over the inserts / keys).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include <tbb/concurrent_hash_map.h>

#include "kernels/core/embedding_table.h"

using namespace tfps::core;
constexpr int64_t kDim = 16;

struct TfpsIndex {
  EmbeddingTable t{kDim, InitSpec()};
  void Insert(const int64_t* k, int64_t n) {
    std::vector<float> zeros(n * kDim, 0.f);
    t.Assign(k, n, zeros.data());
  }
  void Lookup(const int64_t* k, int64_t n, float* out) { t.Lookup(k, n, false, true, out); }
};

struct ChmIndex {
  tbb::concurrent_hash_map<int64_t, float*> m;
  ~ChmIndex() {
    for (auto& kv : m) delete[] kv.second;
  }
  void Insert(const int64_t* k, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      tbb::concurrent_hash_map<int64_t, float*>::accessor a;
      if (m.insert(a, k[i])) a->second = new float[kDim + 2]();
    }
  }
  void Lookup(const int64_t* k, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      tbb::concurrent_hash_map<int64_t, float*>::const_accessor a;
      if (m.find(a, k[i])) std::memcpy(out + i * kDim, a->second, sizeof(float) * kDim);
    }
  }
};

struct StdIndex {
  std::mutex mu;
  std::unordered_map<int64_t, float*> m;
  ~StdIndex() {
    for (auto& kv : m) delete[] kv.second;
  }
  void Insert(const int64_t* k, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      std::lock_guard<std::mutex> l(mu);
      auto it = m.try_emplace(k[i], nullptr).first;
      if (!it->second) it->second = new float[kDim + 2]();
    }
  }
  void Lookup(const int64_t* k, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) {
      std::lock_guard<std::mutex> l(mu);
      auto it = m.find(k[i]);
      if (it != m.end()) std::memcpy(out + i * kDim, it->second, sizeof(float) * kDim);
    }
  }
};

size_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

template <typename F>
double Seconds(F f) {
  auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs fn(begin, end) on 2 threads over halves of [0, n).
template <typename F>
void TwoThreads(int64_t n, F fn) {
  std::thread a([&] { fn(0, n / 2); });
  fn(n / 2, n);
  a.join();
}

template <typename Index>
void Run(const char* name, const std::vector<int64_t>& keys, const std::vector<std::vector<int64_t>>& batches,
         double* insert_mops, double* lookup_mops, double* bytes_per_key) {
  const size_t before = ResidentBytes();
  auto index = std::make_unique<Index>();
  const int64_t n = keys.size();
  const double ti = Seconds([&] {
    // Inserts in batches of 64k as training would, each split over 2 threads.
    for (int64_t b = 0; b < n; b += 65536) {
      const int64_t m = std::min<int64_t>(65536, n - b);
      if (std::is_same<Index, TfpsIndex>::value) {
        index->Insert(keys.data() + b, m);  // parallel inside
      } else {
        TwoThreads(m, [&](int64_t lo, int64_t hi) { index->Insert(keys.data() + b + lo, hi - lo); });
      }
    }
  });
  const size_t after = ResidentBytes();
  int64_t looked = 0;
  std::vector<float> out(65536 * kDim);
  const double tl = Seconds([&] {
    for (const auto& batch : batches) {
      const int64_t m = batch.size();
      if (std::is_same<Index, TfpsIndex>::value) {
        index->Lookup(batch.data(), m, out.data());
      } else {
        TwoThreads(m, [&](int64_t lo, int64_t hi) { index->Lookup(batch.data() + lo, hi - lo, out.data() + lo * kDim); });
      }
      looked += m;
    }
  });
  *insert_mops = n / ti / 1e6;
  *lookup_mops = looked / tl / 1e6;
  *bytes_per_key = static_cast<double>(after - before) / n;
  std::printf("%-10s insert %6.2f M keys/s   lookup %6.2f M keys/s   %6.1f resident bytes/key\n", name,
              *insert_mops, *lookup_mops, *bytes_per_key);
}

int main() {
  const int64_t n = 1 << 20;
  std::mt19937_64 rng(1);
  std::vector<int64_t> keys(n);
  for (auto& k : keys) k = static_cast<int64_t>(rng());
  // Lookup batches: Zipf(1.2) ranks over the inserted keys, deduplicated to 64k per batch.
  std::vector<std::vector<int64_t>> batches;
  std::uniform_real_distribution<double> u(0, 1);
  for (int b = 0; b < 64; ++b) {
    std::vector<int64_t> batch;
    std::unordered_map<int64_t, bool> seen;
    while (batch.size() < 65536) {
      const double r = std::floor(std::pow(1 - u(rng), -1.0 / 0.2));
      const int64_t k = keys[static_cast<int64_t>(r) % n];
      if (seen.emplace(k, true).second) batch.push_back(k);
    }
    batches.push_back(std::move(batch));
  }
  // Each index in a child process, results back through a pipe.
  double ins[3], look[3], bytes[3];
  for (int which = 0; which < 3; ++which) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      double r[3];
      if (which == 0) Run<TfpsIndex>("tfps", keys, batches, &r[0], &r[1], &r[2]);
      if (which == 1) Run<ChmIndex>("tbb_chm", keys, batches, &r[0], &r[1], &r[2]);
      if (which == 2) Run<StdIndex>("std_mutex", keys, batches, &r[0], &r[1], &r[2]);
      std::fflush(stdout);
      _exit(write(fds[1], r, sizeof(r)) == sizeof(r) ? 0 : 1);
    }
    close(fds[1]);  // the child's end: a child that dies before it writes gives EOF, not a hang
    double r[3] = {0, 0, 0};
    const bool got = read(fds[0], r, sizeof(r)) == sizeof(r);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    if (!got) {
      std::fprintf(stderr, "bench_index: the %s run died (%s %d) before it reported\n",
                   which == 0 ? "tfps" : which == 1 ? "tbb_chm" : "std_mutex",
                   WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      return 1;
    }
    ins[which] = r[0];
    look[which] = r[1];
    bytes[which] = r[2];
  }
  std::printf("RATIO tfps / tbb::concurrent_hash_map: insert %.2fx, lookup %.2fx, memory %.2fx\n",
              ins[0] / ins[1], look[0] / look[1], bytes[0] / bytes[1]);
  std::printf("RATIO tfps / std::unordered_map+mutex: insert %.2fx, lookup %.2fx, memory %.2fx\n",
              ins[0] / ins[2], look[0] / look[2], bytes[0] / bytes[2]);
  std::printf("ideal bytes/key (8 + 4*dim): %lld\n", static_cast<long long>(8 + 4 * kDim));
  return 0;
}
