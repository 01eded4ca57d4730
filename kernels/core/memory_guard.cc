#include "kernels/core/memory_guard.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "kernels/core/config.h"

namespace tfps {
namespace core {
namespace {

// (MemAvailable, MemTotal) in bytes, or (-1, -1) when /proc/meminfo cannot be read.
void ReadMeminfo(int64_t* available, int64_t* total) {
  *available = *total = -1;
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) *available = kib * 1024;
    if (std::sscanf(line, "MemTotal: %lld kB", &kib) == 1) *total = kib * 1024;
  }
  std::fclose(f);
}

std::mutex reading_mu;                       // one reading of /proc/meminfo at a time
std::atomic<int64_t> headroom{-1};           // bytes that may still be granted (-1: read first)
std::atomic<int64_t> granted_since{0};       // bytes granted since the last reading

}  // namespace

bool MemoryAvailableFor(int64_t bytes) {
  if (bytes <= 0) return true;
  if (headroom.load() < 0 || granted_since.load() + bytes >= kMemoryRecheckBytes) {
    std::lock_guard<std::mutex> lock(reading_mu);
    int64_t available = 0, total = 0;
    ReadMeminfo(&available, &total);
    if (available < 0 || total <= 0) return true;   // no /proc: no guard
    headroom.store(available - static_cast<int64_t>(kMemoryReserveFraction * static_cast<double>(total)));
    granted_since.store(0);
  }
  if (headroom.fetch_sub(bytes) - bytes < 0) {
    headroom.fetch_add(bytes);
    return false;
  }
  granted_since.fetch_add(bytes);
  return true;
}

}  // namespace core
}  // namespace tfps
