#include "kernels/core/initializer.h"

#include <cmath>

#include "kernels/core/config.h"
#include "kernels/core/hash.h"

namespace tfps {
namespace core {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

inline double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

inline uint64_t Draw(uint64_t base, int64_t j, uint64_t t) {
  return Mix64(base + (static_cast<uint64_t>(j) << 32) + t);
}

inline double Normal(uint64_t base, int64_t j, uint64_t t) {
  const double u1 = 1.0 - Unit(Draw(base, j, 2 * t));
  const double u2 = Unit(Draw(base, j, 2 * t + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

bool ParseInitKind(const std::string& name, InitSpec::Kind* kind) {
  if (name == "zeros") *kind = InitSpec::kZeros;
  else if (name == "constant") *kind = InitSpec::kConstant;
  else if (name == "uniform") *kind = InitSpec::kUniform;
  else if (name == "normal") *kind = InitSpec::kNormal;
  else if (name == "truncated_normal") *kind = InitSpec::kTruncatedNormal;
  else return false;
  return true;
}

void InitRow(const InitSpec& spec, int64_t key, int64_t dim, float* out) {
  switch (spec.kind) {
    case InitSpec::kZeros:
      for (int64_t j = 0; j < dim; ++j) out[j] = 0.f;
      return;
    case InitSpec::kConstant:
      for (int64_t j = 0; j < dim; ++j) out[j] = spec.a;
      return;
    default:
      break;
  }
  const uint64_t base = Mix64(static_cast<uint64_t>(key) ^
                              Mix64(static_cast<uint64_t>(spec.seed) + 0x9E3779B97F4A7C15ULL));
  const double a = spec.a, b = spec.b;
  for (int64_t j = 0; j < dim; ++j) {
    double v;
    if (spec.kind == InitSpec::kUniform) {
      v = a + (b - a) * Unit(Draw(base, j, 0));
    } else if (spec.kind == InitSpec::kNormal) {
      v = a + b * Normal(base, j, 0);
    } else {
      double z = Normal(base, j, 0);
      for (int t = 1; std::fabs(z) > 2.0 && t < kTruncatedNormalMaxAttempts; ++t) {
        z = Normal(base, j, t);
      }
      if (z > 2.0) z = 2.0;
      if (z < -2.0) z = -2.0;
      v = a + b * z;
    }
    out[j] = static_cast<float>(v);
  }
}

}  // namespace core
}  // namespace tfps
