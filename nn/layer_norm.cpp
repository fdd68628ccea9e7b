#include "mpitrain/nn/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace mpitrain::nn {

LayerNorm::LayerNorm(std::size_t normalized_size, float eps, bool elementwise_affine)
    : size_(normalized_size), eps_(eps), affine_(elementwise_affine) {
  if (affine_) {
    weight_.name = "weight";
    weight_.value = Tensor({size_});
    weight_.value.fill(1.0f);
    weight_.grad = Tensor({size_});
    bias_.name = "bias";
    bias_.value = Tensor({size_});
    bias_.grad = Tensor({size_});
  }
}

std::vector<Parameter*> LayerNorm::parameters() {
  if (affine_) return {&weight_, &bias_};
  return {};
}

Tensor LayerNorm::forward(const Tensor& x) {
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor LayerNorm::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void LayerNorm::forward_into(const Tensor& x, Tensor& y) {
  if (x.rank() == 0 || x.shape().back() != size_ || size_ == 0) {
    throw std::invalid_argument("LayerNorm::forward: input " + to_string(x.shape()) +
                                " does not end in normalized_size=" + std::to_string(size_));
  }
  const std::size_t d = size_;
  const std::size_t rows = x.numel() / d;
  shape_ = x.shape();
  xhat_.resize({rows, d});
  rstd_.resize({rows});
  std::copy_n(x.data(), x.numel(), xhat_.data());
  round_to_precision(xhat_.span(), precision_);
  y.resize(x.shape());
  const float* w = affine_ ? weight_.value.data() : nullptr;
  const float* b = affine_ ? bias_.value.data() : nullptr;
  for (std::size_t r = 0; r < rows; ++r) {
    float* xr = xhat_.data() + r * d;
    double sum = 0.0;
    for (std::size_t j = 0; j < d; ++j) sum += xr[j];
    const float mean = static_cast<float>(sum / static_cast<double>(d));
    double sq = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      const double c = static_cast<double>(xr[j] - mean);
      sq += c * c;
    }
    const float var = static_cast<float>(sq / static_cast<double>(d));
    const float rstd = 1.0f / std::sqrt(var + eps_);
    rstd_[r] = rstd;
    float* yr = y.data() + r * d;
    for (std::size_t j = 0; j < d; ++j) xr[j] = (xr[j] - mean) * rstd;
    if (affine_) {
      for (std::size_t j = 0; j < d; ++j) yr[j] = xr[j] * w[j] + b[j];
    } else {
      std::copy_n(xr, d, yr);
    }
  }
  round_to_precision(y.span(), precision_);
}

void LayerNorm::backward_into(const Tensor& grad_out, Tensor& dx) {
  if (shape_.empty() || grad_out.numel() != xhat_.numel()) {
    throw std::invalid_argument("LayerNorm::backward: gradient " + to_string(grad_out.shape()) +
                                " does not match the last input " + to_string(shape_));
  }
  const std::size_t d = size_;
  const std::size_t rows = xhat_.dim(0);
  const float* g = grad_out.data();
  if (affine_) {
    // dbias = sum_r g, dweight = sum_r g * xhat, finished and then added (AccumulateGrad).
    bias_grad_.resize({d});
    weight_grad_.resize({d});
    bias_grad_.zero();
    weight_grad_.zero();
    float* db = bias_grad_.data();
    float* dw = weight_grad_.data();
    for (std::size_t r = 0; r < rows; ++r) {
      const float* gr = g + r * d;
      const float* xr = xhat_.data() + r * d;
      for (std::size_t j = 0; j < d; ++j) {
        db[j] += gr[j];
        dw[j] += gr[j] * xr[j];
      }
    }
    round_to_precision(bias_grad_.span(), precision_);
    round_to_precision(weight_grad_.span(), precision_);
    for (std::size_t j = 0; j < d; ++j) bias_.grad[j] += db[j];
    notify_grad_ready(bias_);
    for (std::size_t j = 0; j < d; ++j) weight_.grad[j] += dw[j];
    notify_grad_ready(weight_);
  }
  if (!requires_input_grad_) {
    dx = Tensor();
    return;
  }
  dx.resize(shape_);
  dxhat_.resize({d});
  float* dxh = dxhat_.data();
  const float* w = affine_ ? weight_.value.data() : nullptr;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* gr = g + r * d;
    const float* xr = xhat_.data() + r * d;
    if (affine_) {
      for (std::size_t j = 0; j < d; ++j) dxh[j] = gr[j] * w[j];
    } else {
      std::copy_n(gr, d, dxh);
    }
    double sum = 0.0;
    double dot = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      sum += dxh[j];
      dot += static_cast<double>(dxh[j]) * xr[j];
    }
    const float mean_dxh = static_cast<float>(sum / static_cast<double>(d));
    const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
    const float rstd = rstd_[r];
    float* out = dx.data() + r * d;
    for (std::size_t j = 0; j < d; ++j) out[j] = rstd * (dxh[j] - mean_dxh - xr[j] * mean_dot);
  }
  round_to_precision(dx.span(), precision_);
}

}  // namespace mpitrain::nn
