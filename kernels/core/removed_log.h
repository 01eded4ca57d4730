// The removed-keys log behind incremental checkpoints: which keys Remove and Evict dropped
// since the last delta, each stamped with the latest step the table had seen.
//
// RemovedLog is one index shard's part, guarded by that shard's lock (not thread-safe). Past
// kMaxRemovedPerShard keys it drops its keys and says it overflowed: the next delta then
// carries every row instead. RemovalTracking is the table's switch and step stamp,
// shared by every shard; it is thread-safe (relaxed atomics: a log entry is ordered against a
// delta by the shard lock both take, not by the stamp).
#ifndef TFPS_KERNELS_CORE_REMOVED_LOG_H_
#define TFPS_KERNELS_CORE_REMOVED_LOG_H_

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/core/config.h"

namespace tfps {
namespace core {

class RemovedLog {
 public:
  // Logs the key stamped with step, unless the log overflowed.
  void Log(int64_t key, int64_t step) {
    if (overflowed_) return;
    if (static_cast<int64_t>(entries_.size()) >= kMaxRemovedPerShard) {
      std::vector<std::pair<int64_t, int64_t>>().swap(entries_);  // the next delta carries every row instead
      overflowed_ = true;
      return;
    }
    entries_.emplace_back(key, step);
  }
  // Appends the keys stamped at or after since_step to *keys (older ones the last delta
  // carried), in the order they were logged; empties the log and returns whether it had
  // overflowed.
  bool Take(int64_t since_step, std::vector<int64_t>* keys);
  // Forgets every key and the overflow; frees the memory.
  void Clear();

  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  bool overflowed() const { return overflowed_; }
  int64_t bytes_reserved() const { return static_cast<int64_t>(entries_.capacity() * sizeof(entries_[0])); }
  int64_t bytes_in_use() const { return static_cast<int64_t>(entries_.size() * sizeof(entries_[0])); }

 private:
  std::vector<std::pair<int64_t, int64_t>> entries_;  // (key, step)
  bool overflowed_ = false;
};

class RemovalTracking {
 public:
  bool on() const { return on_.load(std::memory_order_relaxed); }
  void set_on(bool on) { on_.store(on, std::memory_order_relaxed); }
  // The stamp of a removal now: the latest step NoteStep has seen.
  int64_t stamp() const { return latest_step_.load(std::memory_order_relaxed); }
  // latest = max(latest, step).
  void NoteStep(int64_t step) {
    int64_t seen = latest_step_.load(std::memory_order_relaxed);
    while (step > seen && !latest_step_.compare_exchange_weak(seen, step, std::memory_order_relaxed)) {
    }
  }

 private:
  std::atomic<bool> on_{false};
  std::atomic<int64_t> latest_step_{0};
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_REMOVED_LOG_H_
