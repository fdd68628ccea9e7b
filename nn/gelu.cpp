#include "mpitrain/nn/gelu.hpp"

#include <algorithm>
#include <numbers>
#include <stdexcept>

#include "mpitrain/nn/fast_math.hpp"

namespace mpitrain::nn {
namespace {

constexpr float kSqrt1_2 = static_cast<float>(1.0 / std::numbers::sqrt2);
// 1 / sqrt(2 pi): the standard normal density at 0.
constexpr float kInvSqrt2Pi =
    static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);

}  // namespace

Tensor GELU::forward(const Tensor& x) {
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor GELU::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void GELU::forward_into(const Tensor& x, Tensor& y) {
  input_.resize(x.shape());
  std::copy_n(x.data(), x.numel(), input_.data());
  round_to_precision(input_.span(), precision_);
  y.resize(x.shape());
  cdf_.resize(x.shape());
  const float* in = input_.data();
  float* cdf = cdf_.data();
  float* out = y.data();
  for (std::size_t i = 0, n = x.numel(); i < n; ++i) {
    cdf[i] = 0.5f * (1.0f + erf_as(in[i] * kSqrt1_2));
    out[i] = in[i] * cdf[i];
  }
  round_to_precision(y.span(), precision_);
}

void GELU::backward_into(const Tensor& grad_out, Tensor& dx) {
  if (grad_out.numel() != input_.numel()) {
    throw std::invalid_argument("GELU::backward: gradient " + to_string(grad_out.shape()) +
                                " does not match the last input " + to_string(input_.shape()));
  }
  if (!requires_input_grad_) {
    dx = Tensor();
    return;
  }
  dx.resize(input_.shape());
  const float* x = input_.data();
  const float* cdf = cdf_.data();
  const float* g = grad_out.data();
  float* d = dx.data();
  for (std::size_t i = 0, n = dx.numel(); i < n; ++i) {
    const float pdf = kInvSqrt2Pi * exp_fast(-0.5f * x[i] * x[i]);
    d[i] = g[i] * (cdf[i] + x[i] * pdf);
  }
  round_to_precision(dx.span(), precision_);
}

}  // namespace mpitrain::nn
