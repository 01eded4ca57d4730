// The TF resource that owns one core::EmbeddingTable, and helpers shared by
// the kernels that adapt tensors to it.
#ifndef TFPS_KERNELS_TABLE_RESOURCE_H_
#define TFPS_KERNELS_TABLE_RESOURCE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/session_threads.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"

namespace tfps {

class TableResource : public tensorflow::ResourceBase {
 public:
  // This table is shard `shard` of `num_shards`: it holds the keys with floormod(key, num_shards)
  // == shard, and imports refuse any other key.
  TableResource(int64_t dim, const core::InitSpec& init, uint32_t admit_min_count, int64_t sketch_width,
                int64_t shard, int64_t num_shards)
      : table_(dim, init, admit_min_count, sketch_width), shard_(shard), num_shards_(num_shards) {}
  std::string DebugString() const override {
    return "TfpsEmbeddingTable(dim=" + std::to_string(table_.dim()) + ")";
  }
  int64_t MemoryUsed() const override { return table_.Stats().bytes_reserved; }
  core::EmbeddingTable& table() { return table_; }
  // Set by the init op or a checkpoint import. A table re-created empty on a restarted PS is
  // not initialized until the chief restores it, so the session's ready_op waits for that.
  bool initialized() const { return initialized_.load(std::memory_order_acquire); }
  void set_initialized() { initialized_.store(true, std::memory_order_release); }
  int64_t shard() const { return shard_; }
  int64_t num_shards() const { return num_shards_; }
  // A restore's new contents, built aside by TfpsTableRestoreStage and put in by
  // TfpsTableRestoreCommit once every shard of the table has staged its own (a later stage
  // replaces an earlier one, and frees it).
  struct StagedRestore {
    std::shared_ptr<core::EmbeddingTable::Staged> rows;
    std::vector<int32_t> admission;  // empty: none to import
  };
  void Stage(std::unique_ptr<StagedRestore> staged) {
    std::lock_guard<std::mutex> lock(staged_mu_);
    staged_ = std::move(staged);
  }
  std::unique_ptr<StagedRestore> TakeStaged() {
    std::lock_guard<std::mutex> lock(staged_mu_);
    return std::move(staged_);
  }
  // InvalidArgument naming the first key that does not belong to this shard.
  tensorflow::Status CheckOwnsKeys(const std::string& op, const int64_t* keys, int64_t n) const {
    if (num_shards_ <= 1) return tensorflow::OkStatus();
    for (int64_t i = 0; i < n; ++i) {
      int64_t r = keys[i] % num_shards_;
      if (r < 0) r += num_shards_;
      if (r != shard_) {
        return tensorflow::errors::InvalidArgument(
            op, ": key ", keys[i], " belongs to shard ", r, " of ", num_shards_, ", not to this shard ", shard_,
            " (restore through the variable, which re-shards, or with the same shard count)");
      }
    }
    return tensorflow::OkStatus();
  }

 private:
  core::EmbeddingTable table_;
  const int64_t shard_, num_shards_;
  std::atomic<bool> initialized_{false};
  std::mutex staged_mu_;
  std::unique_ptr<StagedRestore> staged_;
};

// Looks up the table behind input 0; the returned ref must be Unref()'d
// (use tensorflow::core::ScopedUnref).
inline tensorflow::Status GetTable(tensorflow::OpKernelContext* ctx, TableResource** table) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), table);
}

// Base of the kernels whose input 0 is a table: Compute looks it up (holding a ref for the
// call) and hands it to ComputeOnTable.
class TableOpKernel : public tensorflow::OpKernel {
 public:
  using tensorflow::OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) final {
    TableResource* res = nullptr;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &res));
    tensorflow::core::ScopedUnref unref(res);
    try {
      WithSessionThreads(ctx, [&] { ComputeOnResource(ctx, *res); });
    } catch (const std::bad_alloc&) {
      ctx->SetStatus(tensorflow::errors::ResourceExhausted(type_string(), ": out of memory in table ",
                                                           res->DebugString(), "; the table is as it was"));
    }
  }

 protected:
  // Kernels that read or set the resource's own state (the initialized flag) override this.
  virtual void ComputeOnResource(tensorflow::OpKernelContext* ctx, TableResource& res) {
    ComputeOnTable(ctx, res.table());
  }
  virtual void ComputeOnTable(tensorflow::OpKernelContext*, core::EmbeddingTable&) {}
};

// Checks that `t` is a vector of keys.
inline tensorflow::Status CheckKeys(const tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& t) {
  if (!tensorflow::TensorShapeUtils::IsVector(t.shape())) {
    return tensorflow::errors::InvalidArgument(ctx->op_kernel().type_string(),
                                               ": keys must be a vector, got shape ",
                                               t.shape().DebugString());
  }
  return tensorflow::OkStatus();
}

// Checks that `t` is [n, dim] float rows.
inline tensorflow::Status CheckRows(const tensorflow::OpKernelContext* ctx, const char* what,
                                    const tensorflow::Tensor& t, int64_t n, int64_t dim) {
  if (t.dims() != 2 || t.dim_size(0) != n || t.dim_size(1) != dim) {
    return tensorflow::errors::InvalidArgument(ctx->op_kernel().type_string(), ": ", what, " must be [",
                                               n, ", ", dim, "] to match keys and the table dim, got ",
                                               t.shape().DebugString());
  }
  return tensorflow::OkStatus();
}

}  // namespace tfps

#endif  // TFPS_KERNELS_TABLE_RESOURCE_H_
