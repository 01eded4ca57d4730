// Kernels of the lookup ops: TfpsTableFind and TfpsTableLookupUnique (rows of keys, inserting
// on the training path), TfpsGatherRows and TfpsScatterAddRows (expanding unique rows to the
// batch and its gradient back), TfpsSetPrefetchMode. Thin adapters to kernels/core.
#include <cstring>
#include <string>
#include <vector>

#include "kernels/core/gather.h"
#include "kernels/core/unique.h"
#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

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
    WithSessionThreads(ctx, [&] {
      core::GatherRows(params.flat<float>().data(), dim, idx, n, out->flat<float>().data());
    });
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
    tensorflow::Status status;
    WithSessionThreads(ctx, [&] {   // the scratch is sized for the pieces the budget splits into
      Tensor scratch;
      status = ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({core::ScatterAddScratch(n, rows, dim)}),
                                  &scratch);
      if (!status.ok()) return;
      core::ScatterAddRows(data.flat<float>().data(), dim, idx, n, rows, out->flat<float>().data(),
                           scratch.flat<float>().data());
    });
    OP_REQUIRES_OK(ctx, status);
  }
};

class SetPrefetchModeOp : public TableOpKernel {
 public:
  explicit SetPrefetchModeOp(OpKernelConstruction* ctx) : TableOpKernel(ctx) {
    std::string mode;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mode", &mode));
    mode_ = mode == "off" ? core::PrefetchMode::kOff
            : mode == "group" ? core::PrefetchMode::kGroup : core::PrefetchMode::kRolling;
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    static const char* const kNames[] = {"off", "group", "rolling"};
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tensorflow::tstring>()() = kNames[static_cast<int>(table.SetPrefetch(mode_))];
  }

 private:
  core::PrefetchMode mode_ = core::PrefetchMode::kRolling;
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableFind").Device(tensorflow::DEVICE_CPU), TableFindOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableLookupUnique").Device(tensorflow::DEVICE_CPU), TableLookupUniqueOp);
REGISTER_KERNEL_BUILDER(Name("TfpsGatherRows").Device(tensorflow::DEVICE_CPU), GatherRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfpsScatterAddRows").Device(tensorflow::DEVICE_CPU), ScatterAddRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfpsSetPrefetchMode").Device(tensorflow::DEVICE_CPU), SetPrefetchModeOp);

}  // namespace
}  // namespace tfps
