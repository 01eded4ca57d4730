// Row updates of the fused sparse-apply optimizers: one table row's value and slots moved by
// one gradient, element-wise over `dim` floats, as tf.compat.v1.train's optimizers move a
// variable (TF's ApplyGradientDescent, ApplyAdagrad, ApplyAdam, ApplyFtrl).
//
// Plain functions over float pointers: value, slots and gradient are `dim` floats each, the
// slots are the parts of the row that follow the value ([value | slot 0 | slot 1]). They do
// not overlap (restrict), so the loops vectorize (sqrtps, divps: the same IEEE results as
// scalar code; the op library builds with -fno-math-errno). Optimizer state that is not in
// the row -- the learning rate, Adam's beta powers -- is an explicit argument. No locking: the
// caller holds the row (EmbeddingTable::Update's callback runs under the row's shard lock).
// Defined here, inline, so that they inline into that per-row callback.
#ifndef TFPS_KERNELS_CORE_ROW_UPDATE_H_
#define TFPS_KERNELS_CORE_ROW_UPDATE_H_

#include <cmath>
#include <cstdint>

namespace tfps {
namespace core {

// value -= lr * g.
inline void SgdRow(float* __restrict value, const float* __restrict g, int64_t dim, float lr) {
  for (int64_t j = 0; j < dim; ++j) value[j] -= lr * g[j];
}

// accum += g^2; value -= lr * g / sqrt(accum) (ApplyAdagrad: no epsilon, so an accumulator
// that starts at 0 and meets a zero gradient gives NaN, as TF's does).
inline void AdagradRow(float* __restrict value, float* __restrict accum, const float* __restrict g, int64_t dim,
                       float lr) {
  for (int64_t j = 0; j < dim; ++j) {
    accum[j] += g[j] * g[j];
    value[j] -= lr * g[j] / std::sqrt(accum[j]);
  }
}

struct AdamConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
};

// beta^t for the row's t-th update (t >= 1), in double: Adam's bias correction.
inline double AdamBetaPower(float beta, int64_t t) { return std::pow(static_cast<double>(beta), static_cast<double>(t)); }

// ApplyAdam's step size at beta powers beta1^t and beta2^t: lr * sqrt(1 - beta2^t) / (1 - beta1^t),
// computed in double and rounded once.
inline float AdamStepSize(float lr, double beta1_power, double beta2_power) {
  return static_cast<float>(lr * std::sqrt(1.0 - beta2_power) / (1.0 - beta1_power));
}

// m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  value -= lr_t * m / (sqrt(v) + epsilon)
// (ApplyAdam: epsilon outside the root, added to the uncorrected sqrt(v); lr_t from
// AdamStepSize). m and v move as TF writes them: m += (g - m) * (1 - b1).
inline void AdamRow(float* __restrict value, float* __restrict m, float* __restrict v, const float* __restrict g,
                    int64_t dim, float lr_t, const AdamConfig& c) {
  const float b1 = c.beta1, b2 = c.beta2, eps = c.epsilon;
  for (int64_t j = 0; j < dim; ++j) {
    m[j] += (g[j] - m[j]) * (1.f - b1);
    v[j] += (g[j] * g[j] - v[j]) * (1.f - b2);
    value[j] -= lr_t * m[j] / (std::sqrt(v[j]) + eps);
  }
}

struct FtrlConfig {
  float l1 = 0.f;          // >= 0
  float l2 = 0.f;          // >= 0 (the stabilizing L2; shrinkage L2 is not supported)
  float lr_power = -0.5f;  // <= 0; -0.5 takes sqrt, 0 is a fixed learning rate
};

// FTRL-proximal as ApplyFtrl (no l2 shrinkage):
//   new_accum = accum + g^2
//   linear += g - (new_accum^-lr_power - accum^-lr_power) / lr * value
//   quadratic = new_accum^-lr_power / lr + 2 l2
//   value = |linear| > l1 ? (sign(linear) l1 - linear) / quadratic : 0;  accum = new_accum
inline void FtrlRow(float* __restrict value, float* __restrict accum, float* __restrict linear,
                    const float* __restrict g, int64_t dim, float lr, const FtrlConfig& c) {
  const bool half = c.lr_power == -0.5f;
  for (int64_t j = 0; j < dim; ++j) {
    const float new_accum = accum[j] + g[j] * g[j];
    const float p_new = half ? std::sqrt(new_accum) : std::pow(new_accum, -c.lr_power);
    const float p_old = half ? std::sqrt(accum[j]) : std::pow(accum[j], -c.lr_power);
    linear[j] += g[j] - (p_new - p_old) / lr * value[j];
    const float quadratic = p_new / lr + 2.f * c.l2;
    const float sign = linear[j] > 0.f ? 1.f : (linear[j] < 0.f ? -1.f : 0.f);
    value[j] = std::fabs(linear[j]) > c.l1 ? (sign * c.l1 - linear[j]) / quadratic : 0.f;
    accum[j] = new_accum;
  }
}

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_ROW_UPDATE_H_
