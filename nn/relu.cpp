#include "mpitrain/nn/relu.hpp"

#include <algorithm>
#include <stdexcept>

namespace mpitrain::nn {

Tensor ReLU::forward(const Tensor& x) {
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor ReLU::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void ReLU::forward_into(const Tensor& x, Tensor& y) {
  y.resize(x.shape());
  const float* in = x.data();
  float* out = y.data();
  // `in < 0 ? 0 : in` keeps NaN (torch's relu propagates it) and vectorises.
  for (std::size_t i = 0, n = x.numel(); i < n; ++i) out[i] = in[i] < 0.0f ? 0.0f : in[i];
  round_to_precision(y.span(), precision_);
  output_.resize(y.shape());
  std::copy_n(y.data(), y.numel(), output_.data());
}

void ReLU::backward_into(const Tensor& grad_out, Tensor& dx) {
  if (grad_out.numel() != output_.numel()) {
    throw std::invalid_argument("ReLU::backward: gradient " + to_string(grad_out.shape()) +
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
  // Both operands loaded unconditionally so the select vectorises; a NaN/inf gradient where
  // y <= 0 still gives 0, as torch's threshold_backward.
  for (std::size_t i = 0, n = dx.numel(); i < n; ++i) {
    const float gi = g[i];
    d[i] = y[i] > 0.0f ? gi : 0.0f;
  }
  round_to_precision(dx.span(), precision_);
}

}  // namespace mpitrain::nn
