// Kernels of the fused sparse-apply ops: one probe per key updates value and
// slots in place under the row's shard lock; the row math is core/row_update.h.
#include <string>

#include "kernels/core/row_update.h"
#include "kernels/table_resource.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
namespace errors = tensorflow::errors;

// Validates (table, keys, grads, lr, step), makes sure the table has
// `num_slots` slots starting at `slot_init`, then runs Update(fn).
class ApplyOpBase : public TableOpKernel {
 public:
  using TableOpKernel::TableOpKernel;

 protected:
  // fn(row, grad, dim, lr, updates) updates one row [value | slots] from grad [dim];
  // updates = how many times the row was updated before.
  template <typename Fn>
  void Apply(OpKernelContext* ctx, core::EmbeddingTable& table, int num_slots, const float* slot_init, Fn fn) {
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
                 [&](int64_t i, float* row, uint32_t updates) { fn(row, g + i * dim, dim, rate, updates); }, g,
                 sizeof(float) * dim);
  }
};

class ApplyGradientDescentOp : public ApplyOpBase {
 public:
  using ApplyOpBase::ApplyOpBase;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    Apply(ctx, table, 0, nullptr, [](float* row, const float* g, int64_t dim, float lr, uint32_t) {
      core::SgdRow(row, g, dim, lr);
    });
  }
};

class ApplyAdagradOp : public ApplyOpBase {
 public:
  explicit ApplyAdagradOp(OpKernelConstruction* ctx) : ApplyOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("initial_accumulator_value", &init_acc_));
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    Apply(ctx, table, 1, &init_acc_, [](float* row, const float* g, int64_t dim, float lr, uint32_t) {
      core::AdagradRow(row, row + dim, g, dim, lr);
    });
  }

 private:
  float init_acc_ = 0.1f;
};

// Scalar float input `index` of the op (hyperparameters), validated.
bool ScalarInput(OpKernelContext* ctx, int index, float* out) {
  const Tensor& t = ctx->input(index);
  if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    ctx->CtxFailure(errors::InvalidArgument(ctx->op_kernel().type_string(), ": input ", index,
                                            " must be a scalar, got ", t.shape().DebugString()));
    return false;
  }
  *out = t.scalar<float>()();
  return true;
}

// Lazy Adam: only the rows of the batch move; each row's bias correction uses its own step
// count t (its number of updates, freq + 1), not the global step, which is
// tf.compat.v1.train.AdamOptimizer's update for a row updated at every step.
class ApplyAdamOp : public ApplyOpBase {
 public:
  using ApplyOpBase::ApplyOpBase;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    core::AdamConfig c;
    if (!ScalarInput(ctx, 5, &c.beta1) || !ScalarInput(ctx, 6, &c.beta2) || !ScalarInput(ctx, 7, &c.epsilon)) return;
    const float zeros[2] = {0.f, 0.f};
    Apply(ctx, table, 2, zeros, [c](float* row, const float* g, int64_t dim, float lr, uint32_t updates) {
      const int64_t t = static_cast<int64_t>(updates) + 1;
      const float lr_t = core::AdamStepSize(lr, core::AdamBetaPower(c.beta1, t), core::AdamBetaPower(c.beta2, t));
      core::AdamRow(row, row + dim, row + 2 * dim, g, dim, lr_t, c);
    });
  }
};

// FTRL-proximal as tf.compat.v1.train.FtrlOptimizer (ApplyFtrl, no l2 shrinkage); slot 0 is
// the accumulator (starting at initial_accumulator_value), slot 1 the linear term.
class ApplyFtrlOp : public ApplyOpBase {
 public:
  explicit ApplyFtrlOp(OpKernelConstruction* ctx) : ApplyOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("initial_accumulator_value", &init_[0]));
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    core::FtrlConfig c;
    if (!ScalarInput(ctx, 5, &c.l1) || !ScalarInput(ctx, 6, &c.l2) || !ScalarInput(ctx, 7, &c.lr_power)) return;
    Apply(ctx, table, 2, init_, [c](float* row, const float* g, int64_t dim, float lr, uint32_t) {
      core::FtrlRow(row, row + dim, row + 2 * dim, g, dim, lr, c);
    });
  }

 private:
  float init_[2] = {0.1f, 0.f};
};

REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyAdam").Device(tensorflow::DEVICE_CPU), ApplyAdamOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyFtrl").Device(tensorflow::DEVICE_CPU), ApplyFtrlOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyGradientDescent").Device(tensorflow::DEVICE_CPU),
                        ApplyGradientDescentOp);
REGISTER_KERNEL_BUILDER(Name("TfpsTableApplyAdagrad").Device(tensorflow::DEVICE_CPU), ApplyAdagradOp);

}  // namespace
}  // namespace tfps
