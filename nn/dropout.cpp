#include "mpitrain/nn/dropout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mpitrain::nn {

Dropout::Dropout(float p, std::uint64_t seed, std::uint64_t stream) : p_(p), rng_(seed, stream) {
  if (!(p >= 0.0f && p <= 1.0f)) {
    throw std::invalid_argument("Dropout: probability " + std::to_string(p) +
                                " is not in [0, 1]");
  }
}

Tensor Dropout::forward(const Tensor& x) {
  shape_ = x.shape();
  forwarded_ = true;
  Tensor y = Tensor::uninitialized(x.shape());
  identity_ = !training_ || p_ == 0.0f;
  if (identity_) {
    std::copy_n(x.data(), x.numel(), y.data());
  } else {
    const float keep = 1.0f - p_;
    const float scale = keep > 0.0f ? static_cast<float>(1.0 / (1.0 - p_)) : 0.0f;
    mask_.resize(x.shape());
    float* m = mask_.data();
    for (std::size_t i = 0, n = x.numel(); i < n; ++i) {
      m[i] = rng_.uniform() < keep ? scale : 0.0f;
    }
    const float* in = x.data();
    float* out = y.data();
    for (std::size_t i = 0, n = x.numel(); i < n; ++i) out[i] = in[i] * m[i];
  }
  round_to_precision(y.span(), precision_);
  return y;
}

Tensor Dropout::backward(const Tensor& grad_out) {
  if (!forwarded_ || grad_out.numel() != nn::numel(shape_)) {
    throw std::invalid_argument("Dropout::backward: gradient " + to_string(grad_out.shape()) +
                                " does not match the last input " + to_string(shape_));
  }
  if (!requires_input_grad_) return Tensor();
  Tensor dx = Tensor::uninitialized(shape_);
  if (identity_) {
    std::copy_n(grad_out.data(), grad_out.numel(), dx.data());
  } else {
    const float* g = grad_out.data();
    const float* m = mask_.data();
    float* d = dx.data();
    for (std::size_t i = 0, n = dx.numel(); i < n; ++i) d[i] = g[i] * m[i];
  }
  round_to_precision(dx.span(), precision_);
  return dx;
}

}  // namespace mpitrain::nn
