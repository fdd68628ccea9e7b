#include "mpitrain/nn/tanh.hpp"

#include <algorithm>
#include <stdexcept>

#include "mpitrain/nn/fast_math.hpp"

namespace mpitrain::nn {

Tensor Tanh::forward(const Tensor& x) {
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor Tanh::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void Tanh::forward_into(const Tensor& x, Tensor& y) {
  y.resize(x.shape());
  const float* in = x.data();
  float* out = y.data();
  for (std::size_t i = 0, n = x.numel(); i < n; ++i) out[i] = tanh_fast(in[i]);
  round_to_precision(y.span(), precision_);
  output_.resize(y.shape());
  std::copy_n(y.data(), y.numel(), output_.data());
}

void Tanh::backward_into(const Tensor& grad_out, Tensor& dx) {
  if (grad_out.numel() != output_.numel()) {
    throw std::invalid_argument("Tanh::backward: gradient " + to_string(grad_out.shape()) +
                                " does not match the last output " +
                                to_string(output_.shape()));
  }
  if (!requires_input_grad_) {
    dx = Tensor();
    return;
  }
  dx.resize(output_.shape());
  const float* y = output_.data();
  const float* g = grad_out.data();
  float* d = dx.data();
  for (std::size_t i = 0, n = dx.numel(); i < n; ++i) d[i] = g[i] * (1.0f - y[i] * y[i]);
  round_to_precision(dx.span(), precision_);
}

}  // namespace mpitrain::nn
