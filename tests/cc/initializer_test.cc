// Unit tests of the row initializer (initializer.h).
#include <cmath>
#include <cstring>

#include "kernels/core/initializer.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

TEST(Initializer, InitializerIsDeterministicAndShaped) {
  InitSpec spec;
  spec.kind = InitSpec::kTruncatedNormal;
  spec.a = 0.5f;
  spec.b = 2.0f;
  spec.seed = 7;
  float a[8], b[8];
  InitRow(spec, 42, 8, a);
  InitRow(spec, 42, 8, b);
  CHECK(std::memcmp(a, b, sizeof(a)) == 0);
  InitRow(spec, 43, 8, b);
  CHECK(std::memcmp(a, b, sizeof(a)) != 0);
  // Moments and the 2-stddev truncation over many keys.
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int k = 0; k < n; ++k) {
    InitRow(spec, k, 1, a);
    CHECK(a[0] >= 0.5f - 4.0f && a[0] <= 0.5f + 4.0f);
    sum += a[0];
    sq += (a[0] - 0.5) * (a[0] - 0.5);
  }
  CHECK(std::fabs(sum / n - 0.5) < 0.05);
  // Truncated at 2 sigma: stddev is 0.88 sigma.
  CHECK(std::fabs(std::sqrt(sq / n) - 0.88 * 2.0) < 0.05);
  spec.kind = InitSpec::kUniform;
  spec.a = -1.f;
  spec.b = 3.f;
  for (int k = 0; k < 1000; ++k) {
    InitRow(spec, k, 1, a);
    CHECK(a[0] >= -1.f && a[0] < 3.f);
  }
  InitSpec kind;
  CHECK(ParseInitKind("normal", &kind.kind) && kind.kind == InitSpec::kNormal);
  CHECK(!ParseInitKind("glorot", &kind.kind));
}

TEST(Initializer, NormalQuantileInvertsTheCdf) {
  for (double p : {1e-300, 1e-12, 1e-4, 0.0227, 0.3, 0.5, 0.6, 0.975, 1 - 1e-9}) {
    const double z = NormalQuantile(p);
    const double back = 0.5 * std::erfc(-z / std::sqrt(2.0));
    CHECK(std::fabs(back - p) <= 1e-12 * p);
  }
  CHECK(NormalQuantile(0.5) == 0.0);
  CHECK(std::fabs(NormalQuantile(0.2) + NormalQuantile(0.8)) < 1e-15);
}
