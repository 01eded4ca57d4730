#include "kernels/core/bucket_pool.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace tfps {
namespace core {

namespace {
// At most rows_per_block rows, and no more than fit in kMaxBlockBytes (at least one).
int64_t RowsPerBlock(int64_t stride, int64_t rows_per_block) {
  const int64_t fit = kMaxBlockBytes / (stride * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(1, std::min(rows_per_block, fit));
}
}  // namespace

BucketPool::BucketPool(int64_t stride, int64_t rows_per_block)
    : stride_(stride),
      rows_per_block_(stride < 2 || rows_per_block < 1 ? 1 : RowsPerBlock(stride, rows_per_block)),
      next_in_block_(rows_per_block_) {
  if (stride < 2 || rows_per_block < 1) throw std::invalid_argument("BucketPool: bad stride");
}

float* BucketPool::Allocate() {
  tbb::spin_mutex::scoped_lock lock(mu_);
  return AllocateLocked();
}

void BucketPool::Allocate(int64_t k, float** rows) {
  tbb::spin_mutex::scoped_lock lock(mu_);
  int64_t i = 0;
  try {
    for (; i < k; ++i) rows[i] = AllocateLocked();
  } catch (const std::bad_alloc&) {
    while (i > 0) FreeLocked(rows[--i]);  // all or nothing
    throw;
  }
}

float* BucketPool::AllocateLocked() {
  if (free_list_ != nullptr) {
    float* row = free_list_;
    std::memcpy(&free_list_, row, sizeof(float*));
    ++in_use_;
    return row;
  }
  if (next_in_block_ == rows_per_block_) {
    blocks_.reserve(blocks_.size() + 1);  // may throw before the block exists: nothing leaks
    blocks_.emplace_back(new float[rows_per_block_ * stride_]);
    next_in_block_ = 0;
  }
  ++in_use_;
  return blocks_.back().get() + (next_in_block_++) * stride_;
}

void BucketPool::Free(float* row) {
  tbb::spin_mutex::scoped_lock lock(mu_);
  FreeLocked(row);
}

void BucketPool::FreeLocked(float* row) {
  --in_use_;
  std::memcpy(row, &free_list_, sizeof(float*));
  free_list_ = row;
}

int64_t BucketPool::rows_in_use() const {
  tbb::spin_mutex::scoped_lock lock(mu_);
  return in_use_;
}

int64_t BucketPool::bytes_reserved() const {
  tbb::spin_mutex::scoped_lock lock(mu_);
  return static_cast<int64_t>(blocks_.size()) * rows_per_block_ * stride_ *
         static_cast<int64_t>(sizeof(float));
}

}  // namespace core
}  // namespace tfps
