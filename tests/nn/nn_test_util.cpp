#include "nn_test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "mpitrain/nn/parameter.hpp"

namespace mpitrain::nn::testing {

void expect_close(const Tensor& actual, const Tensor& expected, double rtol,
                  const std::string& what) {
  ASSERT_EQ(to_string(actual.shape()), to_string(expected.shape())) << what << ": shapes";
  double scale = 0.0;
  for (std::size_t i = 0; i < expected.numel(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(expected[i])));
  }
  std::size_t bad = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (std::size_t i = 0; i < expected.numel(); ++i) {
    const double e = expected[i];
    const double a = actual[i];
    const double err = std::abs(a - e);
    const double allowed = rtol * std::abs(e) + rtol * scale;
    const bool same_special = (std::isnan(a) && std::isnan(e)) || (std::isinf(e) && a == e);
    if (!same_special && !(err <= allowed)) {
      if (bad < 5) first << "\n  [" << i << "] actual " << a << " expected " << e;
      ++bad;
      worst = std::max(worst, std::isfinite(err) ? err / std::max(allowed, 1e-300) : INFINITY);
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << expected.numel()
                     << " elements outside rtol " << rtol << " (worst at " << worst
                     << "x the allowed error):" << first.str();
}

Tensor random_tensor(Shape shape, Rng& rng, float lo, float hi) {
  Tensor t(std::move(shape));
  rng.fill_uniform(t.span(), lo, hi);
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c(t.shape());
  std::copy_n(t.data(), t.numel(), c.data());
  return c;
}

namespace {

double projected(Module& module, const Tensor& x, const Tensor& r,
                 const std::function<void()>& before_forward) {
  if (before_forward) before_forward();
  const Tensor y = module.forward(x);
  double sum = 0.0;
  for (std::size_t i = 0; i < y.numel(); ++i) sum += static_cast<double>(y[i]) * r[i];
  return sum;
}

// Returns the central-difference derivative of the projection with respect to `v`.
double central_difference(Module& module, const Tensor& x, const Tensor& r, float& v, float h,
                          const std::function<void()>& before_forward) {
  const float saved = v;
  v = saved + h;
  const double plus = projected(module, x, r, before_forward);
  v = saved - h;
  const double minus = projected(module, x, r, before_forward);
  v = saved;
  return (plus - minus) / (2.0 * static_cast<double>(h));
}

}  // namespace

void check_gradients(Module& module, const Tensor& x, float h, double tol,
                     const std::function<void()>& before_forward) {
  Rng rng(99, 7);
  if (before_forward) before_forward();
  const Tensor y = module.forward(x);
  const Tensor r = random_tensor(y.shape(), rng);
  const std::vector<Parameter*> params = module.parameters();
  zero_grad(params);
  const Tensor dx = module.backward(r);

  if (!dx.empty()) {
    Tensor xv = copy_of(x);
    Tensor numeric(x.shape());
    for (std::size_t i = 0; i < xv.numel(); ++i) {
      numeric[i] = static_cast<float>(central_difference(module, xv, r, xv[i], h, before_forward));
    }
    expect_close(dx, numeric, tol, "input gradient vs central differences");
  }
  for (Parameter* p : params) {
    Tensor numeric(p->value.shape());
    for (std::size_t i = 0; i < p->value.numel(); ++i) {
      numeric[i] = static_cast<float>(
          central_difference(module, x, r, p->value[i], h, before_forward));
    }
    expect_close(p->grad, numeric, tol, "gradient of '" + p->name + "' vs central differences");
  }
}

}  // namespace mpitrain::nn::testing
