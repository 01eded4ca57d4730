// Kernels of the checkpoint ops: a table's full and incremental snapshots (export, import,
// removed-keys tracking), its admission sketch, and TfpsCheckTables, which reads a checkpoint's
// index with TF's own BundleReader and checks it against the tables a Saver is about to restore.
// (The kernels that read a checkpoint's parts into the tables are in checkpoint_read_kernels.cc.)
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/checkpoint_parts.h"
#include "kernels/core/table_snapshots.h"
#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

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

// Reads and checks inputs 1..6 (keys, values, slots, freq, last_step, slot_init) into a snapshot.
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

class TableExportOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    // The rows go straight into the outputs (one copy of the shard, not two).
    Status status;
    std::vector<float> slot_init;
    try {
      Export(ctx, table, &status, &slot_init);
    } catch (const AllocationFailed&) {
      ctx->SetStatus(status);   // allocate_output's own error (the shard's locks are released)
      return;
    }
    CopyOut<float>(ctx, 5, slot_init, TensorShape({static_cast<int64_t>(slot_init.size())}));
  }

 private:
  struct AllocationFailed {};
  static void Export(OpKernelContext* ctx, core::EmbeddingTable& table, Status* status_out,
                     std::vector<float>* slot_init_out) {
    Status& status = *status_out;
    std::vector<float>& slot_init = *slot_init_out;
    core::TableSnapshots(table).ExportInto([&](const core::RowLayout& layout, int64_t n) {
      core::RowBuffers out;
      Tensor* t[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
      const TensorShape shapes[5] = {TensorShape({n}), TensorShape({n, layout.dim}),
                                     TensorShape({n, layout.dim * layout.num_slots}), TensorShape({n}),
                                     TensorShape({n})};
      for (int i = 0; i < 5 && status.ok(); ++i) status = ctx->allocate_output(i, shapes[i], &t[i]);
      if (!status.ok()) throw AllocationFailed();
      slot_init = layout.slot_init;
      out.keys = t[0]->flat<int64_t>().data();
      out.values = t[1]->flat<float>().data();
      out.slots = t[2]->flat<float>().data();
      out.freq = t[3]->flat<int64_t>().data();
      out.last_step = t[4]->flat<int64_t>().data();
      return out;
    });
  }
};

class TableImportOp : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;
  void ComputeOnResource(OpKernelContext* ctx, TableResource& res) override {
    core::TableSnapshot snap;
    OP_REQUIRES_OK(ctx, ReadSnapshot(ctx, res.table().dim(), &snap));
    OP_REQUIRES_OK(ctx, res.CheckOwnsKeys(type_string(), snap.keys.data(), static_cast<int64_t>(snap.keys.size())));
    std::string error;
    OP_REQUIRES(ctx, core::TableSnapshots(res.table()).Import(snap, &error),
                errors::InvalidArgument(type_string(), ": ", error));
    res.set_initialized();
  }
};

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
    core::TableSnapshots(table).ExportDelta(since.scalar<int64_t>()(), &snap, &removed, &complete);
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
    OP_REQUIRES(ctx, core::TableSnapshots(res.table()).ImportDelta(snap, gone, complete.scalar<bool>()(), &error),
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

class CheckTablesOp : public OpKernel {
 public:
  explicit CheckTablesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
    OP_REQUIRES(ctx, names_.size() == dims_.size(),
                errors::InvalidArgument("TfpsCheckTables: ", names_.size(), " names but ", dims_.size(), " dims"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& prefix = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(prefix.shape()),
                errors::InvalidArgument("TfpsCheckTables: prefix must be a scalar"));
    const std::string path(prefix.scalar<tensorflow::tstring>()());
    tensorflow::BundleReader reader(tensorflow::Env::Default(), path);
    OP_REQUIRES_OK(ctx, reader.status());
    std::string problems;
    for (size_t t = 0; t < names_.size(); ++t) {
      TableParts parts;
      Status found = ReadTableParts(reader, names_[t], dims_[t], &parts);
      if (!found.ok() && !tensorflow::errors::IsInvalidArgument(found) && !tensorflow::errors::IsNotFound(found)) {
        // Not a mismatch: the checkpoint cannot be read (a file cut short, say).
        ctx->SetStatus(Status(found.code(), "checkpoint " + path + ": table '" + names_[t] + "': " +
                                                std::string(found.message())));
        return;
      }
      if (!found.ok()) {
        problems += (problems.empty() ? "" : "; ") + ("table '" + names_[t] + "' " + std::string(found.message()));
      }
    }
    OP_REQUIRES(ctx, problems.empty(),
                errors::InvalidArgument("checkpoint ", path, " cannot restore these tables exactly, so none was "
                                        "restored: ", problems));
    Tensor* ok = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &ok));
    ok->scalar<bool>()() = true;
  }

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> dims_;
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableExport").Device(tensorflow::DEVICE_CPU), TableExportOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableImport").Device(tensorflow::DEVICE_CPU), TableImportOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableExportDelta").Device(tensorflow::DEVICE_CPU), TableExportDeltaOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableImportDelta").Device(tensorflow::DEVICE_CPU), TableImportDeltaOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableTrackRemoved").Device(tensorflow::DEVICE_CPU), TableTrackRemovedOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableExportAdmission").Device(tensorflow::DEVICE_CPU), TableExportAdmissionOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableImportAdmission").Device(tensorflow::DEVICE_CPU), TableImportAdmissionOp);
REGISTER_KERNEL_BUILDER(Name("TfpsCheckTables").Device(tensorflow::DEVICE_CPU), CheckTablesOp);

}  // namespace
}  // namespace tfps
