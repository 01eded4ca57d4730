// Memory floor of the table's batch paths, and the table against it, on 1..N threads.
//
// The floor: for each id of a batch, two dependent random reads over arrays of the table's
// sizes -- a 4-byte slot of an index of the table's capacity (a row id), then that row of an
// arena of the table's row stride -- with the freedom the table has (the same rolling prefetch:
// the slot kPrefetchDistance * 2 ids ahead, the row kPrefetchDistance ahead), but no probing,
// no key compare, no locks and the output written in batch order. Its read-modify-write twin
// adds a gradient row to every float of a row of an optimizer's stride (1 slot: Adagrad, 2:
// Adam) and writes it back. A batch is split into as many consecutive pieces as threads.
// The table: core::EmbeddingTable filled with the same number of keys, then timed on the same
// batch: read-only lookups, insert-path lookups (find-or-insert of present keys), Adagrad and
// Adam applies of the batch's distinct keys; threads set by tbb::global_control.
// Prints M ids/s (median of --repeats) per cell and ratios table / floor; --json adds one JSON
// line per cell (bench_scaling.py reads it).
//
// Usage: bench_floor [--keys 1e6,1e7] [--dim 16] [--threads 1,2] [--batch 1048576] [--repeats 5]
//                    [--floor-only] [--json]
// The floor runs twice: on 4 KiB pages, as the table's rows and index take, and on transparent
// huge pages (madvise; the kernel's setting "madvise" or "always"), where its reads miss the TLB
// far less: the stricter anchor, and the difference is what the TLB costs.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <tbb/global_control.h>

#include "kernels/core/config.h"
#include "kernels/core/embedding_table.h"
#include "kernels/core/hash.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/tagged_index.h"

using namespace tfps::core;

namespace {

struct Options {
  std::vector<int64_t> keys{1000000, 10000000};
  int64_t dim = 16;
  std::vector<int> threads{1, 2};
  int64_t batch = 1 << 20;
  int repeats = 5;
  bool floor_only = false, json = false;
};

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    out.push_back(static_cast<int64_t>(std::strtod(p, &end)));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

// A key per row position (a bijection), as bench_scaling.py's keys_of.
int64_t KeyOf(int64_t p) { return static_cast<int64_t>((static_cast<uint64_t>(p) * 0x9E3779B97F4A7C15ULL) >> 2); }

// Anonymous memory, optionally advised to take transparent huge pages.
struct Mapping {
  void* p = nullptr;
  size_t bytes = 0;
  Mapping(size_t b, bool huge) : bytes(b) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("bench_floor: mmap");
      std::exit(1);
    }
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  }
  ~Mapping() { munmap(p, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A rate: items per wall second, and CPU nanoseconds (all threads) per item, which other
// processes on the machine disturb less than the wall clock.
struct Rate {
  double per_s = 0, cpu_ns = 0;
};

// fn() over `items`, the median of `repeats` runs after one warm-up (wall and CPU apart).
Rate Time(int repeats, int64_t items, const std::function<void()>& fn) {
  fn();
  std::vector<double> wall, cpu;
  for (int r = 0; r < repeats; ++r) {
    const double c = CpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    fn();
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    cpu.push_back(CpuSeconds() - c);
  }
  return {items / Median(wall), Median(cpu) / items * 1e9};
}

// fn(begin, end) over `threads` consecutive pieces of [0, n), each on its own thread.
void Pieces(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t piece = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(fn, std::min(n, t * piece), std::min(n, (t + 1) * piece));
  fn(0, std::min(n, piece));
  for (auto& th : pool) th.join();
}

// The floor's arrays: an index of the table's capacity (every slot a random row id) and an arena
// of n rows of `stride` floats.
struct Floor {
  int64_t n, cap, stride, dim;
  Mapping index, arena;
  Floor(int64_t n_, int64_t stride_, int64_t dim_, bool huge)
      : n(n_), cap(static_cast<int64_t>(n_ / 0.65) + 1), stride(stride_), dim(dim_),
        index(cap * sizeof(uint32_t), huge), arena(n_ * stride_ * sizeof(float), huge) {
    uint32_t* slots = static_cast<uint32_t*>(index.p);
    std::mt19937_64 rng(7);
    for (int64_t i = 0; i < cap; ++i) slots[i] = static_cast<uint32_t>(rng() % static_cast<uint64_t>(n));
    float* rows = static_cast<float*>(arena.p);
    for (int64_t i = 0; i < n * stride; ++i) rows[i] = 0.5f;
  }
  const uint32_t* slots() const { return static_cast<const uint32_t*>(index.p); }
  float* row(uint32_t id) const { return static_cast<float*>(arena.p) + static_cast<int64_t>(id) * stride; }
  uint32_t IdOf(int64_t key) const { return slots()[TaggedIndex::Home(HashKey(key), cap)]; }

  // For j in [b, e): visit(j, row of keys[j]), the slot prefetched 2d ahead and the row d ahead.
  template <typename Visit>
  void Walk(const int64_t* keys, int64_t b, int64_t e, size_t row_bytes, const Visit& visit) const {
    constexpr int64_t d = kPrefetchDistance;
    auto slot_of = [&](int64_t j) { __builtin_prefetch(&slots()[TaggedIndex::Home(HashKey(keys[j]), cap)]); };
    auto row_of = [&](int64_t j) { PrefetchLines(row(IdOf(keys[j])), row_bytes); };
    for (int64_t j = b; j < std::min(e, b + 2 * d); ++j) slot_of(j);
    for (int64_t j = b; j < std::min(e, b + d); ++j) row_of(j);
    for (int64_t j = b; j < e; ++j) {
      if (j + 2 * d < e) slot_of(j + 2 * d);
      if (j + d < e) row_of(j + d);
      visit(j, row(IdOf(keys[j])));
    }
  }
  void Lookup(const int64_t* keys, int64_t m, float* out, int threads) const {
    const size_t row_bytes = sizeof(float) * (2 + dim);
    Pieces(m, threads, [&](int64_t b, int64_t e) {
      Walk(keys, b, e, row_bytes, [&](int64_t j, const float* r) { std::memcpy(out + j * dim, r + 2, sizeof(float) * dim); });
    });
  }
  // Every float of the row's value and slots gets the gradient row added (a row's bytes read
  // and written once).
  void ReadModifyWrite(const int64_t* keys, int64_t m, const float* grads, int slots, int threads) const {
    const size_t row_bytes = sizeof(float) * stride;
    Pieces(m, threads, [&](int64_t b, int64_t e) {
      Walk(keys, b, e, row_bytes, [&](int64_t j, float* r) {
        const float* g = grads + j * dim;
        for (int s = 0; s <= slots; ++s) {
          float* part = r + 2 + s * dim;
          for (int64_t k = 0; k < dim; ++k) part[k] += g[k];
        }
      });
    });
  }
};

int64_t StrideFor(int64_t dim, int slots) { return (2 + dim * (1 + slots) + 2 + 1) / 2 * 2; }

int64_t PhysBytes() { return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE); }

// The process's anonymous memory in transparent huge pages now (MiB; /proc/self/smaps_rollup).
int64_t HugeMiB() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "AnonHugePages: %lld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb / 1024;
}

struct Cell {
  int64_t n = 0;
  int threads = 0;
  Rate floor_lookup, floor_rmw1, floor_rmw2;   // 4 KiB pages
  Rate huge_lookup, huge_rmw1, huge_rmw2;      // transparent huge pages
  Rate lookup, insert_path, adagrad, adam;
  double bytes_per_key = 0;
};

void Run(const Options& o, int64_t n) {
  const int64_t dim = o.dim, m = o.batch;
  std::mt19937_64 rng(static_cast<uint64_t>(n) + dim);
  std::vector<int64_t> keys(m);
  for (auto& k : keys) k = KeyOf(static_cast<int64_t>(rng() % static_cast<uint64_t>(n)));
  // The distinct keys in order of first appearance (what a training step's apply gets).
  std::vector<int64_t> uniq;
  {
    std::unordered_set<int64_t> seen(m * 2);
    for (int64_t k : keys) if (seen.insert(k).second) uniq.push_back(k);
  }
  const int64_t u = static_cast<int64_t>(uniq.size());
  std::vector<float> out(m * dim), grads(m * dim, 0.01f);
  std::vector<Cell> cells(o.threads.size());
  for (size_t t = 0; t < o.threads.size(); ++t) {
    cells[t].n = n;
    cells[t].threads = o.threads[t];
  }
  Rate fill_rate;  // the table's fill (Assign in batches of 2^20 keys), at the machine's threads
  int64_t huge_mib = 0, table_huge_mib = 0;  // the most seen while a phase held its memory
  // Floor phases, one array set at a time, on small pages and then on huge ones.
  for (bool huge : {false, true}) {
    for (int slots = 0; slots <= 2; ++slots) {
      if (n * StrideFor(dim, slots) * 4 > PhysBytes() * 7 / 10) continue;
      Floor f(n, StrideFor(dim, slots), dim, huge);
      if (huge) huge_mib = std::max(huge_mib, HugeMiB());
      for (size_t t = 0; t < o.threads.size(); ++t) {
        const int th = o.threads[t];
        Cell& c = cells[t];
        if (slots == 0) {
          (huge ? c.huge_lookup : c.floor_lookup) = Time(o.repeats, m, [&] { f.Lookup(keys.data(), m, out.data(), th); });
        } else {
          (slots == 1 ? (huge ? c.huge_rmw1 : c.floor_rmw1) : (huge ? c.huge_rmw2 : c.floor_rmw2)) =
              Time(o.repeats, u, [&] { f.ReadModifyWrite(uniq.data(), u, grads.data(), slots, th); });
        }
      }
    }
  }
  if (!o.floor_only) {
    // Table phases: 0 slots (lookups), then Adagrad's slot; Adam's two slots in a fresh table.
    for (int slots : {1, 2}) {
      if (n * (StrideFor(dim, slots) * 4 + 8) > PhysBytes() * 7 / 10) continue;
      EmbeddingTable table(dim, InitSpec());
      {
        const double start = CpuSeconds();
        const auto wall = std::chrono::steady_clock::now();
        std::vector<int64_t> fill(std::min<int64_t>(n, 1 << 20));
        std::vector<float> zeros(fill.size() * dim, 0.f);
        for (int64_t b = 0; b < n; b += static_cast<int64_t>(fill.size())) {
          const int64_t k = std::min<int64_t>(n - b, fill.size());
          for (int64_t i = 0; i < k; ++i) fill[i] = KeyOf(b + i);
          table.Assign(fill.data(), k, zeros.data());
        }
        if (slots == 1) {
          fill_rate = {n / std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count(),
                       (CpuSeconds() - start) / n * 1e9};
        }
      }
      table_huge_mib = std::max(table_huge_mib, HugeMiB());
      for (size_t t = 0; t < o.threads.size(); ++t) {
        tbb::global_control gc(tbb::global_control::max_allowed_parallelism, o.threads[t]);
        Cell& c = cells[t];
        if (slots == 1) {
          const TableStats st = table.Stats();
          c.bytes_per_key = static_cast<double>(st.bytes_reserved) / st.rows;
          c.lookup = Time(o.repeats, m, [&] { table.Lookup(keys.data(), m, false, true, out.data()); });
          c.insert_path = Time(o.repeats, m, [&] { table.Lookup(keys.data(), m, true, false, out.data()); });
        }
      }
      const std::vector<float> init = {0.1f, 0.f};
      std::string error;
      if (!table.EnsureSlots(slots, init.data(), &error)) {
        std::fprintf(stderr, "bench_floor: %s\n", error.c_str());
        std::exit(1);
      }
      const float* g = grads.data();
      for (size_t t = 0; t < o.threads.size(); ++t) {
        tbb::global_control gc(tbb::global_control::max_allowed_parallelism, o.threads[t]);
        Cell& c = cells[t];
        int64_t step = 1;
        if (slots == 1) {
          c.adagrad = Time(o.repeats, u, [&] {
            table.Update(uniq.data(), u, step++, [&](int64_t i, float* row, uint32_t) {
              float* acc = row + dim;
              const float* gi = g + i * dim;
              for (int64_t k = 0; k < dim; ++k) {
                acc[k] += gi[k] * gi[k];
                row[k] -= 0.05f * gi[k] / std::sqrt(acc[k]);
              }
            }, g, sizeof(float) * dim);
          });
        } else {
          c.adam = Time(o.repeats, u, [&] {
            table.Update(uniq.data(), u, step++, [&](int64_t i, float* row, uint32_t updates) {
              float* mom = row + dim;
              float* var = row + 2 * dim;
              const float* gi = g + i * dim;
              const double t1 = updates + 1.0;
              const float alpha = static_cast<float>(0.001 * std::sqrt(1 - std::pow(0.999, t1)) / (1 - std::pow(0.9, t1)));
              for (int64_t k = 0; k < dim; ++k) {
                mom[k] = 0.9f * mom[k] + 0.1f * gi[k];
                var[k] = 0.999f * var[k] + 0.001f * gi[k] * gi[k];
                row[k] -= alpha * mom[k] / (std::sqrt(var[k]) + 1e-8f);
              }
            }, g, sizeof(float) * dim);
          });
        }
      }
    }
  }
  // "M/s (CPU ns per item)" and ratios of wall rates.
  auto fmt = [](const Rate& r) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%6.2f M/s (%5.1f cpu ns)", r.per_s / 1e6, r.cpu_ns);
    return std::string(buf);
  };
  auto ratio = [](const Rate& a, const Rate& b) { return b.per_s > 0 ? a.per_s / b.per_s : 0.0; };
  std::printf("%.0e keys, dim %lld, batch %lld (%lld distinct), transparent huge pages: floor %lld MiB, "
              "table %lld MiB\n", static_cast<double>(n), static_cast<long long>(dim), static_cast<long long>(m),
              static_cast<long long>(u), static_cast<long long>(huge_mib), static_cast<long long>(table_huge_mib));
  if (!o.floor_only) std::printf("  table fill (Assign, 2^20 keys a batch): %s\n", fmt(fill_rate).c_str());
  for (const Cell& c : cells) {
    std::printf("  %d thread%s  floor, 4 KiB pages: lookup %s, rmw 1 slot %s, rmw 2 slots %s\n", c.threads,
                c.threads > 1 ? "s" : " ", fmt(c.floor_lookup).c_str(), fmt(c.floor_rmw1).c_str(), fmt(c.floor_rmw2).c_str());
    std::printf("            floor, huge pages: lookup %s, rmw 1 slot %s, rmw 2 slots %s\n", fmt(c.huge_lookup).c_str(),
                fmt(c.huge_rmw1).c_str(), fmt(c.huge_rmw2).c_str());
    if (o.floor_only) continue;
    std::printf("            table: lookup %s = %.2fx / %.2fx floor (4 KiB / huge), insert path %s = %.2fx / %.2fx\n",
                fmt(c.lookup).c_str(), ratio(c.lookup, c.floor_lookup), ratio(c.lookup, c.huge_lookup),
                fmt(c.insert_path).c_str(), ratio(c.insert_path, c.floor_lookup), ratio(c.insert_path, c.huge_lookup));
    std::printf("                   Adagrad %s = %.2fx / %.2fx floor rmw, Adam %s = %.2fx / %.2fx; %.1f bytes/key\n",
                fmt(c.adagrad).c_str(), ratio(c.adagrad, c.floor_rmw1), ratio(c.adagrad, c.huge_rmw1), fmt(c.adam).c_str(),
                ratio(c.adam, c.floor_rmw2), ratio(c.adam, c.huge_rmw2), c.bytes_per_key);
  }
  if (cells.size() > 1) {
    const Cell& a = cells.front();
    const Cell& b = cells.back();
    std::printf("  %d threads / %d (wall): floor lookup %.2fx (huge pages %.2fx), rmw %.2fx / %.2fx", b.threads, a.threads,
                ratio(b.floor_lookup, a.floor_lookup), ratio(b.huge_lookup, a.huge_lookup), ratio(b.floor_rmw1, a.floor_rmw1),
                ratio(b.floor_rmw2, a.floor_rmw2));
    if (!o.floor_only) {
      std::printf("; table lookup %.2fx, insert path %.2fx, Adagrad %.2fx, Adam %.2fx", ratio(b.lookup, a.lookup),
                  ratio(b.insert_path, a.insert_path), ratio(b.adagrad, a.adagrad), ratio(b.adam, a.adam));
    }
    std::printf("\n");
  }
  if (o.json) {
    auto j = [](const char* name, const Rate& r) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), ", \"%s\": %.0f, \"%s_cpu_ns\": %.2f", name, r.per_s, name, r.cpu_ns);
      return std::string(buf);
    };
    for (const Cell& c : cells) {
      std::printf("JSON {\"n\": %lld, \"dim\": %lld, \"threads\": %d, \"bytes_per_key\": %.2f%s%s%s%s%s%s%s%s%s%s}\n",
                  static_cast<long long>(c.n), static_cast<long long>(dim), c.threads, c.bytes_per_key,
                  j("floor_lookup", c.floor_lookup).c_str(), j("floor_rmw1", c.floor_rmw1).c_str(),
                  j("floor_rmw2", c.floor_rmw2).c_str(), j("huge_lookup", c.huge_lookup).c_str(),
                  j("huge_rmw1", c.huge_rmw1).c_str(), j("huge_rmw2", c.huge_rmw2).c_str(), j("lookup", c.lookup).c_str(),
                  j("insert_path", c.insert_path).c_str(), j("adagrad", c.adagrad).c_str(), j("adam", c.adam).c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_floor: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--keys") o.keys = ParseList(next());
    else if (a == "--dim") o.dim = std::atoll(next());
    else if (a == "--threads") {
      o.threads.clear();
      for (int64_t t : ParseList(next())) o.threads.push_back(static_cast<int>(t));
    } else if (a == "--batch") o.batch = std::atoll(next());
    else if (a == "--repeats") o.repeats = std::atoi(next());
    else if (a == "--floor-only") o.floor_only = true;
    else if (a == "--json") o.json = true;
    else {
      std::fprintf(stderr, "bench_floor: unknown argument %s (see the usage at the top of benchmarks/bench_floor.cc)\n",
                   a.c_str());
      return 2;
    }
  }
  if (o.keys.empty() || o.threads.empty() || o.dim < 1 || o.batch < 1 || o.repeats < 1 ||
      *std::min_element(o.keys.begin(), o.keys.end()) < 1 || *std::min_element(o.threads.begin(), o.threads.end()) < 1) {
    std::fprintf(stderr, "bench_floor: --keys, --threads, --dim, --batch and --repeats must be positive\n");
    return 2;
  }
  for (int64_t n : o.keys) Run(o, n);
  return 0;
}
