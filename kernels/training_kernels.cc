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
      for (int64_t j = 0; j < dim; ++j) row[j] -= lr * g[j];
    });
  }
};

// acc += g^2; value -= lr * g / sqrt(acc), element-wise over dim floats. value and acc are two
// parts of one row that do not overlap (restrict), so the loop is vectorized (sqrtps, divps:
// the same IEEE results as scalar code; the build has -fno-math-errno).
inline void AdagradRow(float* __restrict value, float* __restrict acc, const float* __restrict g, int64_t dim,
                       float lr) {
  for (int64_t j = 0; j < dim; ++j) {
    acc[j] += g[j] * g[j];
    value[j] -= lr * g[j] / std::sqrt(acc[j]);
  }
}

class ApplyAdagradOp : public ApplyOpBase {
 public:
  explicit ApplyAdagradOp(OpKernelConstruction* ctx) : ApplyOpBase(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("initial_accumulator_value", &init_acc_));
  }
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    Apply(ctx, table, 1, &init_acc_, [](float* row, const float* g, int64_t dim, float lr, uint32_t) {
      AdagradRow(row, row + dim, g, dim, lr);
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

// Lazy Adam: only the rows of the batch move; each row's bias correction uses its own
// step count t (its number of updates, freq + 1), not the global step:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   value -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
// which is tf.compat.v1.train.AdamOptimizer's update for a row updated at every step.
class ApplyAdamOp : public ApplyOpBase {
 public:
  using ApplyOpBase::ApplyOpBase;
  void ComputeOnTable(OpKernelContext* ctx, core::EmbeddingTable& table) override {
    float b1, b2, eps;
    if (!ScalarInput(ctx, 5, &b1) || !ScalarInput(ctx, 6, &b2) || !ScalarInput(ctx, 7, &eps)) return;
    const float zeros[2] = {0.f, 0.f};
    Apply(ctx, table, 2, zeros, [b1, b2, eps](float* row, const float* g, int64_t dim, float lr, uint32_t updates) {
      const double t = static_cast<double>(updates) + 1.0;
      const float lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)) /
                                            (1.0 - std::pow(static_cast<double>(b1), t)));
      float* m = row + dim;
      float* v = row + 2 * dim;
      for (int64_t j = 0; j < dim; ++j) {
        m[j] += (g[j] - m[j]) * (1.f - b1);
        v[j] += (g[j] * g[j] - v[j]) * (1.f - b2);
        row[j] -= lr_t * m[j] / (std::sqrt(v[j]) + eps);
      }
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
    float l1, l2, lr_power;
    if (!ScalarInput(ctx, 5, &l1) || !ScalarInput(ctx, 6, &l2) || !ScalarInput(ctx, 7, &lr_power)) return;
    Apply(ctx, table, 2, init_, [l1, l2, lr_power](float* row, const float* g, int64_t dim, float lr, uint32_t) {
      float* accum = row + dim;
      float* linear = row + 2 * dim;
      for (int64_t j = 0; j < dim; ++j) {
        const float new_accum = accum[j] + g[j] * g[j];
        const bool half = lr_power == -0.5f;
        const float p_new = half ? std::sqrt(new_accum) : std::pow(new_accum, -lr_power);
        const float p_old = half ? std::sqrt(accum[j]) : std::pow(accum[j], -lr_power);
        linear[j] += g[j] - (p_new - p_old) / lr * row[j];
        const float quadratic = p_new / lr + 2.f * l2;
        const float sign = linear[j] > 0.f ? 1.f : (linear[j] < 0.f ? -1.f : 0.f);
        row[j] = std::fabs(linear[j]) > l1 ? (sign * l1 - linear[j]) / quadratic : 0.f;
        accum[j] = new_accum;
      }
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
