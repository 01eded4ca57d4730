// AdmissionSketch: sightings of keys that have no row yet, in a count-min sketch of
// kSketchDepth rows of `width` 16-bit counters (config.h). A key's estimate is the least of its
// kSketchDepth counters: never below its true count (above it only through collisions), in
// bounded memory whatever the rate of new keys. Counting is conservative (only counters below
// the new estimate rise), counters saturate at 65535, and every kSketchAgeFactor * width
// sightings all counters halve (TinyLFU's reset), so old sightings fade. A key is admitted once
// its estimate reaches min_count. The table keeps one sketch per index shard.
//
// Not thread-safe: the owning shard's lock guards it.
#ifndef TFPS_KERNELS_CORE_ADMISSION_SKETCH_H_
#define TFPS_KERNELS_CORE_ADMISSION_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/core/config.h"

namespace tfps {
namespace core {

class AdmissionSketch {
 public:
  // No counters: a table that admits at once.
  AdmissionSketch() = default;
  // width: a power of two >= 1 (the caller checks); counters start at 0. May throw.
  AdmissionSketch(int64_t width, uint32_t min_count);

  bool empty() const { return cells_.empty(); }
  int64_t width() const { return static_cast<int64_t>(cells_.size() / kSketchDepth); }
  uint32_t min_count() const { return min_count_; }
  // [kSketchDepth][width] counters.
  const std::vector<uint16_t>& cells() const { return cells_; }
  // Keys counted that are below min_count: an estimate (exact without collisions), from the
  // counts of this sketch's sightings and, after aging or a load, from its first row.
  int64_t pending() const { return pending_; }

  // The key's estimate (h: its 64-bit hash).
  uint32_t Estimate(uint64_t h) const;
  // Adds count sightings of the key; returns its estimate before and after.
  std::pair<uint32_t, uint32_t> Count(uint64_t h, uint32_t count);
  // Counts the sightings of a key without a row and updates pending(); true when the key is
  // admitted (its estimate reached min_count).
  bool Admit(uint64_t h, uint32_t count) {
    const auto [before, after] = Count(h, count);
    if (after >= min_count_) {
      if (before > 0) --pending_;
      return true;
    }
    if (before == 0) ++pending_;
    return false;
  }
  // After a batch of Admit calls: collisions can make a key look seen before, and pending()
  // drop below 0.
  void ClampPending() {
    if (pending_ < 0) pending_ = 0;
  }

  // A sketch of `width` counters a row holding a saved one of width `from` (both powers of
  // two; saved: [kSketchDepth][from] counts, clipped to [0, 65535]): a wider one folds in (the
  // max of the cells that meet), a narrower one repeats, so no key's estimate drops below what
  // the saved sketch gave. Sightings since aging start at 0. May throw.
  static AdmissionSketch Loaded(int64_t width, uint32_t min_count, const int32_t* saved, int64_t from);
  void Swap(AdmissionSketch& other);

  int64_t bytes_reserved() const { return static_cast<int64_t>(cells_.capacity() * sizeof(uint16_t)); }
  int64_t bytes_in_use() const { return static_cast<int64_t>(cells_.size() * sizeof(uint16_t)); }

 private:
  // Counter of row r for the key (an index into cells_).
  size_t Cell(uint64_t h, int r, int64_t width) const;
  // Pending keys estimated from the first row: counters in (0, min_count).
  int64_t PendingInFirstRow() const;

  std::vector<uint16_t> cells_;
  int64_t pending_ = 0;
  int64_t sightings_ = 0;  // counted since the counters were last halved
  uint32_t min_count_ = 1;
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_ADMISSION_SKETCH_H_
