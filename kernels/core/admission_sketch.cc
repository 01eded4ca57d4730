#include "kernels/core/admission_sketch.h"

#include <algorithm>

#include "kernels/core/hash.h"

namespace tfps {
namespace core {

AdmissionSketch::AdmissionSketch(int64_t width, uint32_t min_count)
    : cells_(kSketchDepth * width, 0), min_count_(min_count) {}

size_t AdmissionSketch::Cell(uint64_t h, int r, int64_t width) const {
  const uint64_t pos = Mix64(h + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(r + 1)) & (width - 1);
  return static_cast<size_t>(r * width + pos);
}

uint32_t AdmissionSketch::Estimate(uint64_t h) const {
  const int64_t w = width();
  uint32_t least = UINT32_MAX;
  for (int r = 0; r < kSketchDepth; ++r) least = std::min<uint32_t>(least, cells_[Cell(h, r, w)]);
  return least;
}

std::pair<uint32_t, uint32_t> AdmissionSketch::Count(uint64_t h, uint32_t count) {
  // Conservative update: the estimate is the least of the key's counters; only counters
  // below the new estimate are raised, which keeps over-counting from collisions small.
  uint16_t* cell[kSketchDepth];
  uint32_t before = UINT32_MAX;
  const int64_t w = width();
  for (int r = 0; r < kSketchDepth; ++r) {
    cell[r] = &cells_[Cell(h, r, w)];
    before = std::min<uint32_t>(before, *cell[r]);
  }
  const uint32_t after = std::min<uint32_t>(UINT16_MAX, before + count);
  for (int r = 0; r < kSketchDepth; ++r) {
    if (*cell[r] < after) *cell[r] = static_cast<uint16_t>(after);
  }
  // Aging: every kSketchAgeFactor * width sightings the counts are halved, so that the sketch
  // holds recent sightings and does not fill up with the keys of long ago.
  sightings_ += count;
  if (sightings_ >= kSketchAgeFactor * w) {
    sightings_ = 0;
    for (uint16_t& c : cells_) c = static_cast<uint16_t>(c >> 1);
    pending_ = PendingInFirstRow();
  }
  return {before, after};
}

int64_t AdmissionSketch::PendingInFirstRow() const {
  int64_t pending = 0;
  const int64_t w = width();
  for (int64_t j = 0; j < w; ++j) pending += (cells_[j] > 0 && cells_[j] < min_count_) ? 1 : 0;
  return pending;
}

AdmissionSketch AdmissionSketch::Loaded(int64_t width, uint32_t min_count, const int32_t* saved, int64_t from) {
  // A key's cell in a sketch of width w is (its mixed hash) & (w - 1), so cell j of a wider
  // sketch meets cell j & (to - 1) of this one, and cell j of this one cell j & (from - 1).
  const int64_t to = width;
  AdmissionSketch out(to, min_count);
  for (int r = 0; r < kSketchDepth; ++r) {
    const int32_t* src = saved + r * from;
    uint16_t* dst = out.cells_.data() + r * to;
    for (int64_t j = 0; j < std::max(from, to); ++j) {
      const int32_t c = std::max<int32_t>(0, std::min<int32_t>(src[j & (from - 1)], UINT16_MAX));
      uint16_t& cell = dst[j & (to - 1)];
      cell = std::max<uint16_t>(cell, static_cast<uint16_t>(c));
    }
  }
  out.pending_ = out.PendingInFirstRow();
  return out;
}

void AdmissionSketch::Swap(AdmissionSketch& other) {
  cells_.swap(other.cells_);
  std::swap(pending_, other.pending_);
  std::swap(sightings_, other.sightings_);
  std::swap(min_count_, other.min_count_);
}

}  // namespace core
}  // namespace tfps
