// Deterministic per-key initial values: value j of key k is a pure function of
// (k, seed, j, kind, a, b), so results never depend on thread order and a row
// evicted and seen again starts the same way. Thread-safe (pure).
//
// The stream (mirrored in tests/initializer_reference.py):
//   base    = Mix64(uint64(key) ^ Mix64(uint64(seed) + 0x9E3779B97F4A7C15))
//   draw(j, t) = Mix64(base + (uint64(j) << 32) + t)
//   U(h)    = (h >> 11) * 2^-53                         in [0, 1)
//   uniform:   a + (b - a) * U(draw(j, 0))              a=minval, b=maxval
//   normal:    a + b * sqrt(-2 ln(1 - U(draw(j, 2t)))) * cos(2 pi U(draw(j, 2t+1)))
//              with t = 0;                                a=mean, b=stddev
//   truncated normal: the first t = 0, 1, ... whose |z| <= 2 (clamped after
//              kTruncatedNormalMaxAttempts).
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

// Writes the dim initial values of `key` to out[0..dim).
void InitRow(const InitSpec& spec, int64_t key, int64_t dim, float* out);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_INITIALIZER_H_
