// Kernels of the table maintenance ops: the handle (creates the table), initialized flag,
// assign, remove, size, eviction and memory stats. Thin adapters to core::EmbeddingTable.
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::core::ScopedUnref;
namespace errors = tensorflow::errors;

// Creates the table on first use (like TF's MutableHashTable), then outputs its handle.
class TableHandleOp : public OpKernel {
 public:
  explicit TableHandleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &name_));
    if (name_.empty()) name_ = name();
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    OP_REQUIRES(ctx, dim_ > 0 && dim_ <= core::kMaxDim,
                errors::InvalidArgument("TfpsTableHandle: dim must be in [1, ", core::kMaxDim, "], got ", dim_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shard", &shard_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_shards", &num_shards_));
    OP_REQUIRES(ctx, num_shards_ >= 1 && shard_ >= 0 && shard_ < num_shards_,
                errors::InvalidArgument("TfpsTableHandle: shard must be in [0, num_shards), got shard ", shard_,
                                        " of ", num_shards_));
    std::string kind;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("initializer", &kind));
    OP_REQUIRES(ctx, core::ParseInitKind(kind, &init_.kind),
                errors::InvalidArgument("TfpsTableHandle: unknown initializer '", kind, "'"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("init_a", &init_.a));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("init_b", &init_.b));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &init_.seed));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("admit_min_count", &admit_));
    OP_REQUIRES(ctx, admit_ >= 1,
                errors::InvalidArgument("TfpsTableHandle: admit_min_count must be >= 1, got ", admit_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("admit_sketch_width", &sketch_width_));
    OP_REQUIRES(ctx, sketch_width_ >= core::kMinSketchWidth && sketch_width_ <= core::kMaxSketchWidth &&
                         (sketch_width_ & (sketch_width_ - 1)) == 0,
                errors::InvalidArgument("TfpsTableHandle: admit_sketch_width must be a power of two in [",
                                        core::kMinSketchWidth, ", ", core::kMaxSketchWidth, "], got ", sketch_width_));
  }

  void Compute(OpKernelContext* ctx) override {
    const tensorflow::ResourceHandle handle =
        tensorflow::MakeResourceHandle<TableResource>(ctx, container_, name_);
    TableResource* table = nullptr;
    OP_REQUIRES_OK(ctx, tensorflow::LookupOrCreateResource<TableResource>(
                            ctx, handle, &table, [this](TableResource** t) {
                              try {
                                *t = new TableResource(dim_, init_, static_cast<uint32_t>(admit_), sketch_width_,
                                                       shard_, num_shards_);
                              } catch (const std::bad_alloc&) {
                                return errors::ResourceExhausted("TfpsTableHandle: out of memory creating table '",
                                                                 name_, "' (admission sketch of ", sketch_width_,
                                                                 " counters per row)");
                              }
                              return tensorflow::OkStatus();
                            }));
    ScopedUnref unref(table);
    OP_REQUIRES(ctx, table->table().dim() == dim_,
                errors::InvalidArgument("TfpsTableHandle: table '", name_, "' exists with dim ",
                                        table->table().dim(), ", this op asks for dim ", dim_));
    OP_REQUIRES(ctx, table->shard() == shard_ && table->num_shards() == num_shards_,
                errors::InvalidArgument("TfpsTableHandle: table '", name_, "' exists as shard ", table->shard(),
                                        " of ", table->num_shards(), ", this op asks for shard ", shard_, " of ",
                                        num_shards_));
    Tensor* out = nullptr;
    tensorflow::AllocatorAttributes attr;
    attr.set_on_host(true);
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out, attr));
    out->scalar<tensorflow::ResourceHandle>()() = handle;
  }

 private:
  std::string container_, name_;
  int64_t dim_ = 0;
  int64_t admit_ = 1, sketch_width_ = core::kSketchWidth;
  int64_t shard_ = 0, num_shards_ = 1;
  core::InitSpec init_;
};

class TableInitializeOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnResource(OpKernelContext*, TableResource& res) override { res.set_initialized(); }
};

class TableIsInitializedOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<bool>()() = res.initialized();
  }
};

class TableAssignOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& keys = ctx->input(1);
    const Tensor& values = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckKeys(ctx, keys));
    OP_REQUIRES_OK(ctx, CheckRows(ctx, "values", values, keys.dim_size(0), table.dim()));
    table.Assign(keys.flat<int64_t>().data(), keys.dim_size(0), values.flat<float>().data());
  }
};

class TableRemoveOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& keys = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckKeys(ctx, keys));
    Tensor* removed = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &removed));
    removed->scalar<int64_t>()() = table.Remove(keys.flat<int64_t>().data(), keys.dim_size(0));
  }
};

class TableSizeOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    Tensor* size = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &size));
    size->scalar<int64_t>()() = table.size();
  }
};

// The op's attributes (< 0: the rule is off) become the core's policies, built per run (a cap
// holds one eviction's ranks).
class TableEvictOp : public TableOpKernel {
 public:
  explicit TableEvictOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_after_steps", &rules_.after_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_min_freq", &rules_.min_freq));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_l2_below", &rules_.l2_below));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_rows", &rules_.max_rows));
    std::string cap;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("cap_policy", &cap));
    rules_.lru = cap == "lru";
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& step = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(step.shape()),
                errors::InvalidArgument("TfpsTableEvict: step must be a scalar, got ", step.shape().DebugString()));
    const core::EvictionPolicies policies(rules_);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = table.Evict(policies.get(), step.scalar<int64_t>()());
  }

 private:
  core::EvictionRules rules_;
};

// Writes `values` as the op's output 0, an int64 vector.
void OutputVector(OpKernelContext* ctx, std::initializer_list<int64_t> values) {
  Tensor* out = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(values.size())}), &out));
  std::copy(values.begin(), values.end(), out->vec<int64_t>().data());
}

class TableMemoryStatsOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const core::TableStats st = table.Stats();
    OutputVector(ctx, {st.rows, st.bytes_reserved, st.bytes_in_use, st.row_bytes, st.pending, st.removed_logged});
  }
};

class TableMemorySplitOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const core::TableStats st = table.Stats();
    const int64_t rows_bytes = st.rows * st.row_bytes;
    OutputVector(ctx, {st.index_bytes, rows_bytes, st.rows * 2 * static_cast<int64_t>(sizeof(uint32_t)),
                       st.arena_bytes - rows_bytes, st.side_bytes});
  }
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableHandle").Device(tensorflow::DEVICE_CPU), TableHandleOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableInitialize").Device(tensorflow::DEVICE_CPU), TableInitializeOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableIsInitialized").Device(tensorflow::DEVICE_CPU), TableIsInitializedOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableAssign").Device(tensorflow::DEVICE_CPU), TableAssignOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableRemove").Device(tensorflow::DEVICE_CPU), TableRemoveOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableSize").Device(tensorflow::DEVICE_CPU), TableSizeOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableEvict").Device(tensorflow::DEVICE_CPU), TableEvictOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableMemoryStats").Device(tensorflow::DEVICE_CPU), TableMemoryStatsOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableMemorySplit").Device(tensorflow::DEVICE_CPU), TableMemorySplitOp);

}  // namespace
}  // namespace tfps
