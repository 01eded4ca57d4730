// BucketPool: fixed-stride rows carved from blocks that grow by 1.25x from
// kFirstBlockRows up to kRowsPerBlock rows (and kMaxBlockBytes), so a small pool
// stays small; freed rows are recycled through an intrusive free list, so memory
// per row stays at the stride. Thread-safe: Allocate/Free take an internal spin lock. A row pointer
// stays valid until it is freed or the pool is destroyed (blocks never move).
// The pool owns all block memory. Allocate throws std::bad_alloc when memory runs out
// (kernels turn it into ResourceExhausted); the pool is unchanged then.
#ifndef TFPS_KERNELS_CORE_BUCKET_POOL_H_
#define TFPS_KERNELS_CORE_BUCKET_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <tbb/spin_mutex.h>

#include "kernels/core/config.h"

namespace tfps {
namespace core {

class BucketPool {
 public:
  // stride: floats per row (at least 2, so a free row can hold a pointer); max_block_rows: the
  // largest block, in rows (capped by kMaxBlockBytes).
  explicit BucketPool(int64_t stride, int64_t max_block_rows = kRowsPerBlock);
  BucketPool(const BucketPool&) = delete;
  BucketPool& operator=(const BucketPool&) = delete;

  // A row of `stride` uninitialised floats.
  float* Allocate();
  // k rows into rows[0..k), under one lock.
  void Allocate(int64_t k, float** rows);
  // Returns a row obtained from Allocate() to the pool.
  void Free(float* row);

  int64_t stride() const { return stride_; }
  int64_t rows_in_use() const;
  int64_t bytes_reserved() const;

 private:
  const int64_t stride_;
  const int64_t max_block_rows_;
  mutable tbb::spin_mutex mu_;
  std::vector<std::unique_ptr<float[]>> blocks_;
  int64_t block_rows_ = 0;     // rows of the newest block
  int64_t next_in_block_ = 0;  // rows handed out of the newest block
  int64_t rows_reserved_ = 0;  // rows in all blocks
  float* AllocateLocked();
  void FreeLocked(float* row);
  float* free_list_ = nullptr;
  int64_t in_use_ = 0;
};

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_BUCKET_POOL_H_
