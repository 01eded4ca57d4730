#include "kernels/core/initializer.h"

#include <cmath>

#include "kernels/core/hash.h"

namespace tfps {
namespace core {
namespace {

inline double Poly(const double* c, double x) {
  double r = c[7];
  for (int i = 6; i >= 0; --i) r = r * x + c[i];
  return r;
}

// AS241 coefficients, lowest order first (the denominators' constant term is 1).
constexpr double kA[8] = {3.3871328727963666080e0, 1.3314166789178437745e+2, 1.9715909503065514427e+3,
                          1.3731693765509461125e+4, 4.5921953931549871457e+4, 6.7265770927008700853e+4,
                          3.3430575583588128105e+4, 2.5090809287301226727e+3};
constexpr double kB[8] = {1.0, 4.2313330701600911252e+1, 6.8718700749205790830e+2, 5.3941960214247511077e+3,
                          2.1213794301586595867e+4, 3.9307895800092710610e+4, 2.8729085735721942674e+4,
                          5.2264952788528545610e+3};
constexpr double kC[8] = {1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0,
                          3.64784832476320460504e0, 1.27045825245236838258e0, 2.41780725177450611770e-1,
                          2.27238449892691845833e-2, 7.74545014278341407640e-4};
constexpr double kD[8] = {1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
                          1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4,
                          1.05075007164441684324e-9};
constexpr double kE[8] = {6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0,
                          2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
                          2.71155556874348757815e-5, 2.01033439929228813265e-7};
constexpr double kF[8] = {1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
                          7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7,
                          2.04426310338993978564e-15};

inline double Unit(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

double NormalQuantile(double p) {
  const double q = p - 0.5;
  if (std::fabs(q) <= 0.425) {
    const double r = 0.180625 - q * q;
    return q * Poly(kA, r) / Poly(kB, r);
  }
  double r = std::sqrt(-std::log(q < 0 ? p : 1.0 - p));
  double v;
  if (r <= 5.0) {
    r -= 1.6;
    v = Poly(kC, r) / Poly(kD, r);
  } else {
    r -= 5.0;
    v = Poly(kE, r) / Poly(kF, r);
  }
  return q < 0 ? -v : v;
}

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
  static const double kLow = 0.5 * std::erfc(2.0 / std::sqrt(2.0));  // Phi(-2)
  static const double kWidth = 1.0 - 2.0 * kLow;                      // Phi(2) - Phi(-2)
  const uint64_t base = Mix64(static_cast<uint64_t>(key) ^
                              Mix64(static_cast<uint64_t>(spec.seed) + 0x9E3779B97F4A7C15ULL));
  const double a = spec.a, b = spec.b;
  for (int64_t j = 0; j < dim; ++j) {
    const double u = Unit(Mix64(base + (static_cast<uint64_t>(j) << 32)));
    double v;
    if (spec.kind == InitSpec::kUniform) v = a + (b - a) * u;
    else if (spec.kind == InitSpec::kNormal) v = a + b * NormalQuantile(u);
    else v = a + b * NormalQuantile(kLow + u * kWidth);
    out[j] = static_cast<float>(v);
  }
}

}  // namespace core
}  // namespace tfps
