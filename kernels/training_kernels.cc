// Kernels of the fused sparse-apply ops: one probe per key updates value and
// slots in place under the row's shard lock.
#include <cmath>
#include <string>

#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::core::ScopedUnref;
namespace errors = tensorflow::errors;

// Validates (table, keys, grads, lr, step), makes sure the table has
// `num_slots` slots starting at `slot_init`, then runs Update(fn).
class ApplyOpBase : public OpKernel {
 public:
  using OpKernel::OpKernel;

 protected:
  // fn(row, grad, lr) updates one row [value | slots] from grad [dim].
  template <typename Fn>
  void Apply(OpKernelContext* ctx, int num_slots, const float* slot_init, Fn fn) {
    TableResource* res = nullptr;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &res));
    ScopedUnref unref(res);
    core::EmbeddingTable& table = res->table();
    const Tensor& keys = ctx->input(1);
    const Tensor& grads = ctx->input(2);
    const Tensor& lr = ctx->input(3);
    const Tensor& step = ctx->input(4);
    OP_REQUIRES_OK(ctx, CheckKeys(ctx, keys));
    OP_REQUIRES_OK(ctx, CheckRows(ctx, "grads", grads, keys.dim_size(0), table.dim()));
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(lr.shape()) &&
                         tensorflow::TensorShapeUtils::IsScalar(step.shape()),
                errors::InvalidArgument(type_string(), ": lr and step must be scalars"));
    if (table.num_slots() != num_slots) {
      std::string error;
      OP_REQUIRES(ctx, table.EnsureSlots(num_slots, slot_init, &error),
                  errors::InvalidArgument(type_string(), ": ", error));
    }
    const int64_t dim = table.dim();
    const float* g = grads.flat<float>().data();
    const float rate = lr.scalar<float>()();
    table.Update(keys.flat<int64_t>().data(), keys.dim_size(0), step.scalar<int64_t>()(),
                 [&](int64_t i, float* row) { fn(row, g + i * dim, dim, rate); });
  }
};

class ApplyGradientDescentOp : public ApplyOpBase {
 public:
  using ApplyOpBase::ApplyOpBase;
  void Compute(OpKernelContext* ctx) override {
    Apply(ctx, 0, nullptr, [](float* row, const float* g, int64_t dim, float lr) {
      for (int64_t j = 0; j < dim; ++j) row[j] -= lr * g[j];
    });
  }
};

class ApplyAdagradOp : public ApplyOpBase {
 public:
  explicit ApplyAdagradOp(OpKernelConstruction* ctx) : ApplyOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("initial_accumulator_value", &init_acc_));
  }
  void Compute(OpKernelContext* ctx) override {
    Apply(ctx, 1, &init_acc_, [](float* row, const float* g, int64_t dim, float lr) {
      float* acc = row + dim;
      for (int64_t j = 0; j < dim; ++j) {
        acc[j] += g[j] * g[j];
        row[j] -= lr * g[j] / std::sqrt(acc[j]);
      }
    });
  }

 private:
  float init_acc_ = 0.1f;
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyGradientDescent").Device(tensorflow::DEVICE_CPU),
                        ApplyGradientDescentOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyAdagrad").Device(tensorflow::DEVICE_CPU), ApplyAdagradOp);

}  // namespace
}  // namespace tfps
