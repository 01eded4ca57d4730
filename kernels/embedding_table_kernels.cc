// Kernels of the TfpsTable* ops: thin adapters from tensors to core::EmbeddingTable.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "kernels/core/gather.h"
#include "kernels/core/unique.h"
#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
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

class TableFindOp : public TableOpKernel {
 public:
  explicit TableFindOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("insert", &insert_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("missing_zeros", &missing_zeros_));
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& keys = ctx->input(1);
    const Tensor& counts = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckKeys(ctx, keys));
    const int64_t n = keys.dim_size(0), dim = table.dim();
    OP_REQUIRES(ctx, counts.dims() == 1 && (counts.dim_size(0) == 0 || counts.dim_size(0) == n),
                errors::InvalidArgument("TfpsTableFind: counts must be empty or [", n, "], got ",
                                        counts.shape().DebugString()));
    const int32_t* c = counts.flat<int32_t>().data();
    for (int64_t i = 0; i < counts.dim_size(0); ++i) {
      OP_REQUIRES(ctx, c[i] >= 1, errors::InvalidArgument("TfpsTableFind: counts[", i, "] = ", c[i], " is not >= 1"));
    }
    Tensor* values = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, dim}), &values));
    table.Lookup(keys.flat<int64_t>().data(), n, insert_, missing_zeros_, values->flat<float>().data(),
                        counts.dim_size(0) ? counts.flat<int32_t>().data() : nullptr);
  }

 private:
  bool insert_ = true, missing_zeros_ = false;
};

// Dedups ids, probes the table once per distinct id: (unique_ids, inverse, unique_values).
class TableLookupUniqueOp : public TableOpKernel {
 public:
  explicit TableLookupUniqueOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("insert", &insert_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("missing_zeros", &missing_zeros_));
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& ids = ctx->input(1);
    OP_REQUIRES_OK(ctx, CheckKeys(ctx, ids));
    const int64_t n = ids.dim_size(0), dim = table.dim();
    OP_REQUIRES(ctx, n < (int64_t{1} << 31),
                errors::InvalidArgument("TfpsTableLookupUnique: batch of ", n, " ids exceeds 2^31 - 1"));
    Tensor* inverse = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n}), &inverse));
    std::vector<int64_t> uniq;
    std::vector<int32_t> counts;
    core::UniqueWithCounts(ids.flat<int64_t>().data(), n, inverse->flat<int32_t>().data(), &uniq,
                           &counts);
    const int64_t u = static_cast<int64_t>(uniq.size());
    Tensor *uniq_t = nullptr, *values = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({u}), &uniq_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({u, dim}), &values));
    if (u > 0) std::memcpy(uniq_t->flat<int64_t>().data(), uniq.data(), sizeof(int64_t) * u);
    table.Lookup(uniq.data(), u, insert_, missing_zeros_, values->flat<float>().data(), counts.data());
  }

 private:
  bool insert_ = true, missing_zeros_ = false;
};

class GatherRowsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& params = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    OP_REQUIRES(ctx, params.dims() == 2 && indices.dims() == 1,
                errors::InvalidArgument("TfpsGatherRows: params must be a matrix and indices a vector, got ",
                                        params.shape().DebugString(), " and ", indices.shape().DebugString()));
    const int64_t n = indices.dim_size(0), rows = params.dim_size(0), dim = params.dim_size(1);
    const int32_t* idx = indices.flat<int32_t>().data();
    const int64_t bad = core::CheckIndices(idx, n, rows);
    OP_REQUIRES(ctx, bad < 0, errors::InvalidArgument("TfpsGatherRows: indices[", bad, "] = ",
                                                      bad < 0 ? 0 : idx[bad], " is not in [0, ", rows, ")"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, dim}), &out));
    core::GatherRows(params.flat<float>().data(), dim, idx, n, out->flat<float>().data());
  }
};

class ScatterAddRowsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& data = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    const Tensor& num_rows = ctx->input(2);
    OP_REQUIRES(ctx, data.dims() == 2 && indices.dims() == 1 && indices.dim_size(0) == data.dim_size(0) &&
                         tensorflow::TensorShapeUtils::IsScalar(num_rows.shape()),
                errors::InvalidArgument("TfpsScatterAddRows: data [N, D], indices [N] and a scalar num_rows "
                                        "expected, got ", data.shape().DebugString(), ", ",
                                        indices.shape().DebugString(), ", ", num_rows.shape().DebugString()));
    const int64_t n = data.dim_size(0), dim = data.dim_size(1), rows = num_rows.scalar<int64_t>()();
    OP_REQUIRES(ctx, rows >= 0 && (dim == 0 || rows <= core::kMaxOutputFloats / dim),
                errors::InvalidArgument("TfpsScatterAddRows: num_rows must be in [0, ", core::kMaxOutputFloats,
                                        " / dim], got ", rows));
    const int32_t* idx = indices.flat<int32_t>().data();
    const int64_t bad = core::CheckIndices(idx, n, rows);
    OP_REQUIRES(ctx, bad < 0, errors::InvalidArgument("TfpsScatterAddRows: indices[", bad, "] = ",
                                                      bad < 0 ? 0 : idx[bad], " is not in [0, ", rows, ")"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows, dim}), &out));
    Tensor scratch;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT,
                                           TensorShape({core::ScatterAddScratch(n, rows, dim)}), &scratch));
    core::ScatterAddRows(data.flat<float>().data(), dim, idx, n, rows, out->flat<float>().data(),
                         scratch.flat<float>().data());
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

template <typename T, typename U>
void CopyOut(OpKernelContext* ctx, int index, const std::vector<U>& src, TensorShape shape) {
  OP_REQUIRES(ctx, static_cast<int64_t>(src.size()) == shape.num_elements(),
              errors::Internal(ctx->op_kernel().type_string(), ": output ", index, " has ", src.size(),
                               " elements for shape ", shape.DebugString()));
  Tensor* out = nullptr;
  OP_REQUIRES_OK(ctx, ctx->allocate_output(index, shape, &out));
  T* dst = out->flat<T>().data();
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<T>(src[i]);
}

// Outputs 0..5: keys, values, slots, freq, last_step, slot_init of a snapshot.
void WriteSnapshot(OpKernelContext* ctx, const core::TableSnapshot& snap) {
  const int64_t n = static_cast<int64_t>(snap.keys.size());
  CopyOut<int64_t>(ctx, 0, snap.keys, TensorShape({n}));
  CopyOut<float>(ctx, 1, snap.values, TensorShape({n, snap.dim}));
  CopyOut<float>(ctx, 2, snap.slots, TensorShape({n, snap.dim * snap.num_slots}));
  CopyOut<int64_t>(ctx, 3, snap.freq, TensorShape({n}));
  CopyOut<int64_t>(ctx, 4, snap.last_step, TensorShape({n}));
  CopyOut<float>(ctx, 5, snap.slot_init, TensorShape({snap.num_slots}));
}

class TableExportOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    core::TableSnapshot snap;
    table.Export(&snap);
    WriteSnapshot(ctx, snap);
  }
};

// Reads and checks inputs 1..6 (keys, values, slots, freq, last_step, slot_init) into a snapshot.
Status ReadSnapshot(OpKernelContext* ctx, int64_t dim, core::TableSnapshot* snap);

class TableImportOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    core::TableSnapshot snap;
    OP_REQUIRES_OK(ctx, ReadSnapshot(ctx, res.table().dim(), &snap));
    OP_REQUIRES_OK(ctx, res.CheckOwnsKeys(type_string(), snap.keys.data(), static_cast<int64_t>(snap.keys.size())));
    std::string error;
    OP_REQUIRES(ctx, res.table().Import(snap, &error),
                errors::InvalidArgument(type_string(), ": ", error));
    res.set_initialized();
  }
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

Status ReadSnapshot(OpKernelContext* ctx, int64_t dim, core::TableSnapshot* snap) {
  const std::string op = ctx->op_kernel().type_string();
  const Tensor& keys = ctx->input(1);
  const Tensor& values = ctx->input(2);
  const Tensor& slots = ctx->input(3);
  const Tensor& freq = ctx->input(4);
  const Tensor& last_step = ctx->input(5);
  const Tensor& slot_init = ctx->input(6);
  TF_RETURN_IF_ERROR(CheckKeys(ctx, keys));
  const int64_t n = keys.dim_size(0);
  if (values.dims() != 2 || values.dim_size(1) != dim) {
    return errors::InvalidArgument(op, ": values have shape ", values.shape().DebugString(),
                                   " but the table has dim ", dim);
  }
  TF_RETURN_IF_ERROR(CheckRows(ctx, "values", values, n, dim));
  if (slot_init.dims() != 1) {
    return errors::InvalidArgument(op, ": slot_init must be a vector, got ", slot_init.shape().DebugString());
  }
  const int64_t k = slot_init.dim_size(0);
  TF_RETURN_IF_ERROR(CheckRows(ctx, "slots", slots, n, dim * k));
  if (freq.dims() != 1 || freq.dim_size(0) != n || last_step.dims() != 1 || last_step.dim_size(0) != n) {
    return errors::InvalidArgument(op, ": freq ", freq.shape().DebugString(), " and last_step ",
                                   last_step.shape().DebugString(), " must be [", n, "] like keys");
  }
  snap->dim = dim;
  snap->num_slots = static_cast<int>(k);
  auto vec = [](const Tensor& t, auto* out) {
    using V = typename std::remove_pointer_t<decltype(out)>::value_type;
    const V* p = t.flat<V>().data();
    out->assign(p, p + t.NumElements());
  };
  vec(keys, &snap->keys);
  vec(values, &snap->values);
  vec(slots, &snap->slots);
  vec(freq, &snap->freq);
  vec(last_step, &snap->last_step);
  vec(slot_init, &snap->slot_init);
  return tensorflow::OkStatus();
}

class TableExportDeltaOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& since = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(since.shape()),
                errors::InvalidArgument("TfpsTableExportDelta: since_step must be a scalar"));
    core::TableSnapshot snap;
    std::vector<int64_t> removed;
    bool complete = false;
    table.ExportDelta(since.scalar<int64_t>()(), &snap, &removed, &complete);
    WriteSnapshot(ctx, snap);
    CopyOut<int64_t>(ctx, 6, removed, TensorShape({static_cast<int64_t>(removed.size())}));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(7, TensorShape({}), &out));
    out->scalar<bool>()() = complete;
  }
};

class TableImportDeltaOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    core::TableSnapshot snap;
    OP_REQUIRES_OK(ctx, ReadSnapshot(ctx, res.table().dim(), &snap));
    OP_REQUIRES_OK(ctx, res.CheckOwnsKeys(type_string(), snap.keys.data(), static_cast<int64_t>(snap.keys.size())));
    const Tensor& removed = ctx->input(7);
    const Tensor& complete = ctx->input(8);
    OP_REQUIRES(ctx, removed.dims() == 1 && tensorflow::TensorShapeUtils::IsScalar(complete.shape()),
                errors::InvalidArgument("TfpsTableImportDelta: removed must be a vector and complete a scalar, got ",
                                        removed.shape().DebugString(), " and ", complete.shape().DebugString()));
    std::vector<int64_t> gone(removed.flat<int64_t>().data(), removed.flat<int64_t>().data() + removed.NumElements());
    std::string error;
    OP_REQUIRES(ctx, res.table().ImportDelta(snap, gone, complete.scalar<bool>()(), &error),
                errors::InvalidArgument("TfpsTableImportDelta: ", error));
  }
};

class TableTrackRemovedOp : public TableOpKernel {
 public:
  explicit TableTrackRemovedOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("on", &on_));
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& step = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(step.shape()),
                errors::InvalidArgument("TfpsTableTrackRemoved: step must be a scalar, got ", step.shape().DebugString()));
    table.SetTrackRemoved(on_, step.scalar<int64_t>()());
  }

 private:
  bool on_ = true;
};

class TableExportAdmissionOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    std::vector<int32_t> counts;
    table.ExportAdmission(&counts);
    CopyOut<int32_t>(ctx, 0, counts, TensorShape({static_cast<int64_t>(counts.size())}));
  }
};

class TableImportAdmissionOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& counts = ctx->input(1);
    OP_REQUIRES(ctx, counts.dims() == 1,
                errors::InvalidArgument(type_string(), ": counts must be a vector, got ", counts.shape().DebugString()));
    std::string error;
    OP_REQUIRES(ctx, table.ImportAdmission(counts.flat<int32_t>().data(), counts.dim_size(0), &error),
                errors::InvalidArgument(type_string(), ": ", error));
  }
};

class TableEvictOp : public TableOpKernel {
 public:
  explicit TableEvictOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_after_steps", &policy_.after_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_min_freq", &policy_.min_freq));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_l2_below", &policy_.l2_below));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_rows", &policy_.max_rows));
    std::string cap;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("cap_policy", &cap));
    policy_.lru = cap == "lru";
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    const Tensor& step = ctx->input(1);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(step.shape()),
                errors::InvalidArgument("TfpsTableEvict: step must be a scalar, got ", step.shape().DebugString()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = table.Evict(policy_, step.scalar<int64_t>()());
  }

 private:
  core::EvictPolicy policy_;
};

class SetPrefetchModeOp : public OpKernel {
 public:
  explicit SetPrefetchModeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string mode;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mode", &mode));
    mode_ = mode == "off" ? core::PrefetchMode::kOff
            : mode == "group" ? core::PrefetchMode::kGroup : core::PrefetchMode::kRolling;
  }
  void Compute(OpKernelContext* ctx) override {
    static const char* const kNames[] = {"off", "group", "rolling"};
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tensorflow::tstring>()() = kNames[static_cast<int>(core::GetPrefetchMode())];
    core::SetPrefetchMode(mode_);
  }

 private:
  core::PrefetchMode mode_ = core::PrefetchMode::kRolling;
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

#define TFPS_CPU_KERNEL(name, cls) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_CPU), cls)
TFPS_CPU_KERNEL("TfpsTableHandle", TableHandleOp);
TFPS_CPU_KERNEL("TfpsTableFind", TableFindOp);
TFPS_CPU_KERNEL("TfpsTableLookupUnique", TableLookupUniqueOp);
TFPS_CPU_KERNEL("TfpsGatherRows", GatherRowsOp);
TFPS_CPU_KERNEL("TfpsScatterAddRows", ScatterAddRowsOp);
TFPS_CPU_KERNEL("TfpsTableAssign", TableAssignOp);
TFPS_CPU_KERNEL("TfpsTableRemove", TableRemoveOp);
TFPS_CPU_KERNEL("TfpsTableSize", TableSizeOp);
TFPS_CPU_KERNEL("TfpsTableExport", TableExportOp);
TFPS_CPU_KERNEL("TfpsTableImport", TableImportOp);
TFPS_CPU_KERNEL("TfpsTableInitialize", TableInitializeOp);
TFPS_CPU_KERNEL("TfpsTableIsInitialized", TableIsInitializedOp);
TFPS_CPU_KERNEL("TfpsTableMemoryStats", TableMemoryStatsOp);
TFPS_CPU_KERNEL("TfpsTableMemorySplit", TableMemorySplitOp);
TFPS_CPU_KERNEL("TfpsSetPrefetchMode", SetPrefetchModeOp);
TFPS_CPU_KERNEL("TfpsTableEvict", TableEvictOp);
TFPS_CPU_KERNEL("TfpsTableExportDelta", TableExportDeltaOp);
TFPS_CPU_KERNEL("TfpsTableImportDelta", TableImportDeltaOp);
TFPS_CPU_KERNEL("TfpsTableTrackRemoved", TableTrackRemovedOp);
TFPS_CPU_KERNEL("TfpsTableExportAdmission", TableExportAdmissionOp);
TFPS_CPU_KERNEL("TfpsTableImportAdmission", TableImportAdmissionOp);
#undef TFPS_CPU_KERNEL

}  // namespace
}  // namespace tfps
