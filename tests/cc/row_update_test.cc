// Unit tests of the optimizer row updates (row_update.h) against scalar references written out
// here in double precision from the formulas of TF's training ops (ApplyGradientDescent,
// ApplyAdagrad, ApplyAdam, ApplyFtrl), then through the table: lazy Adam's per-row step count,
// two threads updating their own rows.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/core/embedding_table.h"
#include "kernels/core/row_update.h"
#include "tests/cc/testing.h"

using namespace tfps::core;

namespace {

// The references: one element, double precision, state in and out.
void RefSgd(double* w, double g, double lr) { *w -= lr * g; }

void RefAdagrad(double* w, double* accum, double g, double lr) {
  *accum += g * g;
  *w -= lr * g / std::sqrt(*accum);
}

// ApplyAdam at step t: bias correction folded into the step size, epsilon added to sqrt(v).
void RefAdam(double* w, double* m, double* v, double g, double lr, double b1, double b2, double eps, int64_t t) {
  const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
  *m = b1 * *m + (1 - b1) * g;
  *v = b2 * *v + (1 - b2) * g * g;
  *w -= lr_t * *m / (std::sqrt(*v) + eps);
}

// ApplyFtrl (no shrinkage).
void RefFtrl(double* w, double* accum, double* linear, double g, double lr, double l1, double l2, double lr_power) {
  const double new_accum = *accum + g * g;
  const double sigma = (std::pow(new_accum, -lr_power) - std::pow(*accum, -lr_power)) / lr;
  *linear += g - sigma * *w;
  const double quadratic = std::pow(new_accum, -lr_power) / lr + 2 * l2;
  if (std::fabs(*linear) > l1) {
    *w = ((*linear > 0 ? l1 : -l1) - *linear) / quadratic;
  } else {
    *w = 0;
  }
  *accum = new_accum;
}

// float results within a few float roundings of the double reference: `scale` is the size of
// the terms that were added (what the rounding is relative to).
bool Near(float got, double want, double scale) {
  return std::fabs(static_cast<double>(got) - want) <= 4e-6 * (std::fabs(want) + scale) + 1e-30;
}

std::vector<float> Random(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = u(rng);
  return out;
}

}  // namespace

TEST(RowUpdate, SgdAndAdagradRowsMatchTheirReferences) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t dim = 1 + static_cast<int64_t>(rng() % 37);  // not a multiple of the vector width
    const float lr = std::uniform_real_distribution<float>(0.f, 2.f)(rng);
    std::vector<float> w = Random(rng, dim, -3.f, 3.f), g = Random(rng, dim, -5.f, 5.f);
    std::vector<float> accum = Random(rng, dim, 0.01f, 2.f);
    std::vector<float> w_sgd = w, w_ada = w, acc = accum;
    SgdRow(w_sgd.data(), g.data(), dim, lr);
    AdagradRow(w_ada.data(), acc.data(), g.data(), dim, lr);
    for (int64_t j = 0; j < dim; ++j) {
      double ws = w[j], wa = w[j], a = accum[j];
      RefSgd(&ws, g[j], lr);
      RefAdagrad(&wa, &a, g[j], lr);
      CHECK(Near(w_sgd[j], ws, std::fabs(w[j]) + std::fabs(lr * g[j])));
      CHECK(Near(acc[j], a, accum[j]));
      CHECK(Near(w_ada[j], wa, std::fabs(w[j]) + std::fabs(lr * g[j] / std::sqrt(a))));
    }
  }
}

TEST(RowUpdate, SgdAndAdagradEdgeValues) {
  // A zero rate or a zero gradient leaves the value as it was, bit for bit.
  float w[3] = {1.5f, -0.f, 3e-38f}, g[3] = {2.f, 7.f, -1.f}, zero[3] = {0.f, 0.f, 0.f};
  SgdRow(w, g, 3, 0.f);
  CHECK(w[0] == 1.5f && w[1] == 0.f && w[2] == 3e-38f);
  float acc[3] = {0.5f, 1.f, 2.f};
  AdagradRow(w, acc, zero, 3, 0.7f);
  CHECK(w[0] == 1.5f && acc[0] == 0.5f && acc[2] == 2.f);
  // ApplyAdagrad has no epsilon: an empty accumulator and a zero gradient give 0 / 0.
  float v[1] = {1.f}, a0[1] = {0.f}, g0[1] = {0.f};
  AdagradRow(v, a0, g0, 1, 0.1f);
  CHECK(std::isnan(v[0]));
  // The first step from an empty accumulator is a step of lr * sign(g).
  float v1[2] = {1.f, 1.f}, a1[2] = {0.f, 0.f}, g1[2] = {3.f, -0.25f};
  AdagradRow(v1, a1, g1, 2, 0.5f);
  CHECK(v1[0] == 0.5f && v1[1] == 1.5f && a1[0] == 9.f && a1[1] == 0.0625f);
}

TEST(RowUpdate, AdamRowMatchesApplyAdamOverSteps) {
  // Each step starts the reference from the row's float state, so the check is one step's
  // rounding; steps run from t = 1 (no moments yet) on.
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t dim = 1 + static_cast<int64_t>(rng() % 21);
    AdamConfig c;
    c.beta1 = std::uniform_real_distribution<float>(0.f, 0.99f)(rng);
    c.beta2 = std::uniform_real_distribution<float>(0.5f, 0.9999f)(rng);
    c.epsilon = trial % 3 == 0 ? 1e-8f : std::uniform_real_distribution<float>(1e-4f, 0.5f)(rng);
    const float lr = std::uniform_real_distribution<float>(1e-3f, 0.5f)(rng);
    std::vector<float> w = Random(rng, dim, -1.f, 1.f), m(dim, 0.f), v(dim, 0.f);
    for (int64_t t = 1; t <= 30; ++t) {
      const std::vector<float> g = Random(rng, dim, -2.f, 2.f);
      const std::vector<float> w0 = w, m0 = m, v0 = v;
      const float lr_t = AdamStepSize(lr, AdamBetaPower(c.beta1, t), AdamBetaPower(c.beta2, t));
      AdamRow(w.data(), m.data(), v.data(), g.data(), dim, lr_t, c);
      for (int64_t j = 0; j < dim; ++j) {
        double rw = w0[j], rm = m0[j], rv = v0[j];
        RefAdam(&rw, &rm, &rv, g[j], lr, c.beta1, c.beta2, c.epsilon, t);
        CHECK(Near(m[j], rm, std::fabs(m0[j]) + std::fabs(g[j])));
        CHECK(Near(v[j], rv, std::fabs(v0[j]) + g[j] * g[j]));
        // The step's terms: the moments before they cancel, over the root.
        const double terms = lr_t * (std::fabs(m0[j]) + std::fabs(g[j])) / (std::sqrt(rv) + c.epsilon);
        CHECK(Near(w[j], rw, std::fabs(w0[j]) + terms));
      }
    }
  }
}

TEST(RowUpdate, AdamEdgeValues) {
  // t = 1 from zero moments: m = (1-b1) g, v = (1-b2) g^2, and with eps 0 the corrected step
  // is lr * sign(g).
  AdamConfig c;
  c.epsilon = 0.f;
  float w[2] = {1.f, 1.f}, m[2] = {0.f, 0.f}, v[2] = {0.f, 0.f}, g[2] = {4.f, -0.5f};
  AdamRow(w, m, v, g, 2, AdamStepSize(0.25f, AdamBetaPower(c.beta1, 1), AdamBetaPower(c.beta2, 1)), c);
  CHECK(std::fabs(w[0] - 0.75f) < 1e-6f && std::fabs(w[1] - 1.25f) < 1e-6f);
  // Far into training the beta powers vanish and the step size is lr.
  CHECK(AdamBetaPower(0.9f, 1000000) == 0.0);
  CHECK(AdamStepSize(0.125f, AdamBetaPower(0.9f, 1000000), AdamBetaPower(0.999f, 1000000)) == 0.125f);
  // beta1 = 0: m is the gradient. A zero gradient still moves the value by the momentum.
  AdamConfig no_momentum;
  no_momentum.beta1 = 0.f;
  float w1[1] = {0.f}, m1[1] = {5.f}, v1[1] = {1.f}, g1[1] = {2.f};
  AdamRow(w1, m1, v1, g1, 1, 1.f, no_momentum);
  CHECK(m1[0] == 2.f);
  float w2[1] = {0.f}, m2[1] = {0.5f}, v2[1] = {0.25f}, zero[1] = {0.f};
  AdamRow(w2, m2, v2, zero, 1, 1.f, c);
  CHECK(w2[0] < 0.f && std::fabs(m2[0] - 0.45f) < 1e-6f);
  // Epsilon is added to sqrt(v), not put under the root: v = 1e-4 (sqrt 1e-2), eps = 1e-3.
  AdamConfig e;
  e.beta1 = 0.f;
  e.beta2 = 0.f;
  e.epsilon = 1e-3f;
  float w3[1] = {0.f}, m3[1] = {0.f}, v3[1] = {0.f}, g3[1] = {1e-2f};
  AdamRow(w3, m3, v3, g3, 1, 1.f, e);
  CHECK(std::fabs(w3[0] - (-1e-2 / (1e-2 + 1e-3))) < 1e-6);
}

TEST(RowUpdate, FtrlRowMatchesApplyFtrlOverSteps) {
  std::mt19937_64 rng(3);
  const float powers[] = {-0.5f, 0.f, -1.f, -0.25f, -0.75f};
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t dim = 1 + static_cast<int64_t>(rng() % 19);
    FtrlConfig c;
    c.lr_power = powers[trial % 5];
    c.l1 = trial % 4 == 0 ? 0.f : std::uniform_real_distribution<float>(0.f, 0.3f)(rng);
    c.l2 = trial % 3 == 0 ? 0.f : std::uniform_real_distribution<float>(0.f, 1.f)(rng);
    const float lr = std::uniform_real_distribution<float>(0.01f, 1.f)(rng);
    std::vector<float> w(dim, 0.f), accum(dim, trial % 2 ? 0.1f : 1.f), linear(dim, 0.f);
    for (int step = 0; step < 25; ++step) {
      const std::vector<float> g = Random(rng, dim, -1.f, 1.f);
      const std::vector<float> w0 = w, a0 = accum, l0 = linear;
      FtrlRow(w.data(), accum.data(), linear.data(), g.data(), dim, lr, c);
      for (int64_t j = 0; j < dim; ++j) {
        double rw = w0[j], ra = a0[j], rl = l0[j];
        RefFtrl(&rw, &ra, &rl, g[j], lr, c.l1, c.l2, c.lr_power);
        CHECK(Near(accum[j], ra, a0[j] + g[j] * g[j]));
        const double p_new = std::pow(ra, -c.lr_power), p_old = std::pow(static_cast<double>(a0[j]), -c.lr_power);
        const double terms = std::fabs(l0[j]) + std::fabs(g[j]) + (p_new + p_old) / lr * std::fabs(w0[j]);
        CHECK(Near(linear[j], rl, terms));
        // The value is continuous at |linear| = l1, so rounding near it is no jump.
        CHECK(Near(w[j], rw, (c.l1 + terms) / (p_new / lr + 2 * c.l2)));
      }
    }
  }
}

TEST(RowUpdate, FtrlEdgeValues) {
  // |linear| equal to l1 is not beyond it: the value is 0. Just below l1, it is not.
  FtrlConfig c;
  c.l1 = 0.5f;
  c.l2 = 0.25f;
  float w[1] = {0.f}, a[1] = {1.f}, lin[1] = {0.25f}, g[1] = {0.25f};
  FtrlRow(w, a, lin, g, 1, 1.f, c);
  CHECK(lin[0] == 0.5f && w[0] == 0.f && a[0] == 1.0625f);
  c.l1 = 0.25f;
  float w1[1] = {0.f}, a1[1] = {0.f}, l1[1] = {0.25f}, g1[1] = {0.25f};
  FtrlRow(w1, a1, l1, g1, 1, 1.f, c);
  // accum 0 -> 1/16, sqrt = 0.25: quadratic 0.25 / 1 + 0.5 = 0.75; value (0.25 - 0.5) / 0.75.
  CHECK(std::fabs(w1[0] - (-1.f / 3.f)) < 1e-7f);
  // lr_power 0: a fixed rate, sigma is 0 and linear sums the gradients.
  FtrlConfig fixed;
  fixed.lr_power = 0.f;
  float w2[1] = {2.f}, a2[1] = {0.1f}, l2[1] = {0.f}, g2[1] = {-3.f};
  FtrlRow(w2, a2, l2, g2, 1, 0.5f, fixed);
  CHECK(l2[0] == -3.f && w2[0] == 1.5f);  // (0 - (-3)) / (1 / 0.5)
  // l1 = 0 and l2 = 0 with lr_power -0.5 from w = 0: one step is -lr * g / sqrt(accum + g^2).
  FtrlConfig plain;
  float w3[1] = {0.f}, a3[1] = {0.f}, l3[1] = {0.f}, g3[1] = {2.f};
  FtrlRow(w3, a3, l3, g3, 1, 0.5f, plain);
  CHECK(w3[0] == -0.5f);
}

TEST(RowUpdate, LazyAdamThroughTheTableCountsEachRowsOwnSteps) {
  // Rows updated at different steps: each row's bias correction uses its own update count (the
  // table's freq), so a row updated k times holds what k consecutive ApplyAdam steps give.
  EmbeddingTable t(3, InitSpec());
  std::vector<int64_t> keys = {5, -9, 1LL << 40};
  std::vector<float> start = {0.1f, -0.2f, 0.3f, 1.f, 2.f, 3.f, -1.f, 0.f, 1.f};
  t.Assign(keys.data(), 3, start.data());
  const float zeros[2] = {0.f, 0.f};
  std::string error;
  CHECK(t.EnsureSlots(2, zeros, &error));
  AdamConfig c;
  c.beta1 = 0.8f;
  c.beta2 = 0.95f;
  c.epsilon = 1e-6f;
  const float lr = 0.05f;
  std::vector<double> w(start.begin(), start.end()), m(9, 0.0), v(9, 0.0);
  std::vector<int64_t> steps(3, 0);
  std::mt19937_64 rng(4);
  for (int64_t step = 0; step < 40; ++step) {
    const int64_t i = static_cast<int64_t>(rng() % 3);  // one row per step
    const std::vector<float> g = Random(rng, 3, -1.f, 1.f);
    t.Update(&keys[i], 1, step, [&](int64_t, float* row, uint32_t updates) {
      const int64_t n = static_cast<int64_t>(updates) + 1;
      AdamRow(row, row + 3, row + 6, g.data(), 3, AdamStepSize(lr, AdamBetaPower(c.beta1, n), AdamBetaPower(c.beta2, n)),
              c);
    });
    ++steps[i];
    for (int j = 0; j < 3; ++j) RefAdam(&w[3 * i + j], &m[3 * i + j], &v[3 * i + j], g[j], lr, c.beta1, c.beta2, c.epsilon, steps[i]);
  }
  std::vector<float> got(9);
  t.Lookup(keys.data(), 3, false, false, got.data());
  for (int k = 0; k < 9; ++k) CHECK(std::fabs(got[k] - w[k]) < 1e-5);
}

TEST(RowUpdate, TwoThreadsUpdatingTheirOwnRowsGetTheSequentialResult) {
  // Adagrad on two disjoint key sets, one thread each, against the same updates run alone.
  constexpr int64_t kDim = 5, kKeys = 3000;
  auto run = [&](bool threaded) {
    EmbeddingTable t(kDim, InitSpec());
    std::vector<int64_t> keys(2 * kKeys);
    for (int64_t k = 0; k < 2 * kKeys; ++k) keys[k] = k * 7919 - 5000;
    std::vector<float> ones(2 * kKeys * kDim, 1.f);
    t.Assign(keys.data(), 2 * kKeys, ones.data());
    const float init = 0.1f;
    std::string error;
    CHECK(t.EnsureSlots(1, &init, &error));
    auto train = [&](int half) {
      std::vector<float> g(kKeys * kDim);
      for (int64_t i = 0; i < kKeys * kDim; ++i) g[i] = static_cast<float>((i + half) % 7) * 0.25f - 0.75f;
      for (int step = 0; step < 5; ++step) {
        t.Update(keys.data() + half * kKeys, kKeys, step, [&](int64_t i, float* row, uint32_t) {
          AdagradRow(row, row + kDim, g.data() + i * kDim, kDim, 0.3f);
        });
      }
    };
    if (threaded) {
      std::thread a(train, 0), b(train, 1);
      a.join();
      b.join();
    } else {
      train(0);
      train(1);
    }
    std::vector<float> out(2 * kKeys * kDim);
    t.Lookup(keys.data(), 2 * kKeys, false, false, out.data());
    return out;
  };
  CHECK(run(true) == run(false));
}
