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
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor Dropout::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void Dropout::forward_into(const Tensor& x, Tensor& y) {
  shape_ = x.shape();
  forwarded_ = true;
  y.resize(x.shape());
  identity_ = !training_ || p_ == 0.0f;
  if (identity_) {
    std::copy_n(x.data(), x.numel(), y.data());
  } else {
    const float keep = 1.0f - p_;
    const float scale = keep > 0.0f ? static_cast<float>(1.0 / (1.0 - p_)) : 0.0f;
    mask_.resize(x.shape());
    bits_.resize(x.numel());
    rng_.fill_u32(bits_);
    const std::uint32_t* bits = bits_.data();
    float* m = mask_.data();
    const float* in = x.data();
    float* out = y.data();
    // Keep where the draw, as Rng::uniform() maps it to [0, 1), is below 1 - p.
    for (std::size_t i = 0, n = x.numel(); i < n; ++i) {
      const float u = static_cast<float>(static_cast<std::int32_t>(bits[i] >> 8)) * 0x1.0p-24f;
      m[i] = u < keep ? scale : 0.0f;
      out[i] = in[i] * m[i];
    }
  }
  round_to_precision(y.span(), precision_);
}

void Dropout::backward_into(const Tensor& grad_out, Tensor& dx) {
  if (!forwarded_ || grad_out.numel() != mpitrain::numel(shape_)) {
    throw std::invalid_argument("Dropout::backward: gradient " + to_string(grad_out.shape()) +
                                " does not match the last input " + to_string(shape_));
  }
  if (!requires_input_grad_) {
    dx = Tensor();
    return;
  }
  dx.resize(shape_);
  if (identity_) {
    std::copy_n(grad_out.data(), grad_out.numel(), dx.data());
  } else {
    const float* g = grad_out.data();
    const float* m = mask_.data();
    float* d = dx.data();
    for (std::size_t i = 0, n = dx.numel(); i < n; ++i) d[i] = g[i] * m[i];
  }
  round_to_precision(dx.span(), precision_);
}

}  // namespace mpitrain::nn
