// Deterministic per-key initial values: value j of key k is a pure function of
// (k, seed, j, kind, a, b), so results never depend on thread order and a row
// evicted and seen again starts the same way. Thread-safe (pure).
//
// The stream (mirrored in tests/initializer_reference.py):
//   base  = Mix64(uint64(key) ^ Mix64(uint64(seed) + 0x9E3779B97F4A7C15))
//   u_j   = ((Mix64(base + (uint64(j) << 32)) >> 11) + 0.5) * 2^-53     in (0, 1)
//   uniform:          a + (b - a) * u_j                        a=minval, b=maxval
//   normal:           a + b * Phi^-1(u_j)                      a=mean,   b=stddev
//   truncated normal: a + b * Phi^-1(Phi(-2) + u_j * (Phi(2) - Phi(-2)))
// Phi^-1 is Wichura's AS241 (PPND16, relative error ~1e-16). Inverse-CDF
// sampling costs one hash and a rational polynomial per value, and draws the
// 2-stddev truncated normal exactly, without a rejection loop.
#ifndef TFPS_KERNELS_CORE_INITIALIZER_H_
#define TFPS_KERNELS_CORE_INITIALIZER_H_

#include <cstdint>
#include <string>

namespace tfps {
namespace core {

struct InitSpec {
  enum Kind { kZeros = 0, kConstant = 1, kUniform = 2, kNormal = 3, kTruncatedNormal = 4 };
  Kind kind = kZeros;
  float a = 0.f;  // constant value | minval | mean
  float b = 0.f;  // unused | maxval | stddev
  int64_t seed = 0;
};

// Parses "zeros", "constant", "uniform", "normal", "truncated_normal".
bool ParseInitKind(const std::string& name, InitSpec::Kind* kind);

// The standard normal quantile function Phi^-1(p), 0 < p < 1 (AS241).
double NormalQuantile(double p);

// Writes the dim initial values of `key` to out[0..dim).
void InitRow(const InitSpec& spec, int64_t key, int64_t dim, float* out);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_INITIALIZER_H_
