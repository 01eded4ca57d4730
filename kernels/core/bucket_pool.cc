#include "kernels/core/bucket_pool.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace tfps {
namespace core {

namespace {
// At most max_rows rows, and no more than fit in kMaxBlockBytes (at least one).
int64_t MaxBlockRows(int64_t stride, int64_t max_rows) {
  const int64_t fit = kMaxBlockBytes / (stride * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(1, std::min(max_rows, fit));
}
}  // namespace

BucketPool::BucketPool(int64_t stride, int64_t max_block_rows)
    : stride_(stride),
      max_block_rows_(stride < 2 || max_block_rows < 1 ? 1 : MaxBlockRows(stride, max_block_rows)) {
  if (stride < 2 || max_block_rows < 1) throw std::invalid_argument("BucketPool: bad stride");
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
  if (next_in_block_ == block_rows_) {
    const int64_t rows = std::min(max_block_rows_, block_rows_ == 0 ? kFirstBlockRows : block_rows_ + block_rows_ / 4);
    blocks_.reserve(blocks_.size() + 1);  // may throw before the block exists: nothing leaks
    blocks_.emplace_back(new float[rows * stride_]);
    block_rows_ = rows;
    rows_reserved_ += rows;
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
  return rows_reserved_ * stride_ * static_cast<int64_t>(sizeof(float));
}

}  // namespace core
}  // namespace tfps
