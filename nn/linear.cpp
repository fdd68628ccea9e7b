#include "mpitrain/nn/linear.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "mpitrain/nn/gemm.hpp"
#include "mpitrain/nn/init.hpp"

namespace mpitrain::nn {
namespace {

void check_grad_storage(const Parameter& p) {
  if (p.grad.numel() != p.value.numel()) {
    throw std::logic_error("Linear::backward: parameter '" + p.name + "' has gradient of " +
                           std::to_string(p.grad.numel()) + " values for " +
                           std::to_string(p.value.numel()) + " weights");
  }
}

// dst[i] += src[i] for n values.
void add_into(float* dst, const float* src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

Linear::Linear(std::size_t in_features, std::size_t out_features, bool bias, Rng& rng)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  allocate();
  reset_parameters(rng);
}

Linear::Linear(std::size_t in_features, std::size_t out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  allocate();
  Rng rng(0);
  reset_parameters(rng);
}

void Linear::allocate() {
  weight_.name = "weight";
  weight_.value = Tensor({out_, in_});
  weight_.grad = Tensor({out_, in_});
  if (has_bias_) {
    bias_.name = "bias";
    bias_.value = Tensor({out_});
    bias_.grad = Tensor({out_});
  }
}

void Linear::reset_parameters(Rng& rng) {
  linear_default_init(weight_.value, has_bias_ ? &bias_.value : nullptr, rng);
}

std::vector<Parameter*> Linear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

Tensor Linear::forward(const Tensor& x) {
  Tensor y;
  forward_into(x, y);
  return y;
}

Tensor Linear::backward(const Tensor& grad_out) {
  Tensor dx;
  backward_into(grad_out, dx);
  return dx;
}

void Linear::forward_into(const Tensor& x, Tensor& y) {
  if (x.rank() == 0 || x.shape().back() != in_) {
    throw std::invalid_argument("Linear::forward: input " + to_string(x.shape()) +
                                " does not end in in_features=" + std::to_string(in_));
  }
  const std::size_t rows = mpitrain::numel(Shape(x.shape().begin(), x.shape().end() - 1));
  input_shape_ = x.shape();
  input_.resize({rows, in_});
  std::copy_n(x.data(), x.numel(), input_.data());
  round_to_precision(input_.span(), precision_);

  const float* w = weight_.value.data();
  forward_precision_ = precision_;
  if (precision_ != Precision::fp32) {
    weight_used_.resize(weight_.value.shape());
    std::copy_n(weight_.value.data(), weight_.value.numel(), weight_used_.data());
    round_to_precision(weight_used_.span(), precision_);
    w = weight_used_.data();
  }

  Shape out_shape = x.shape();
  out_shape.back() = out_;
  y.resize(std::move(out_shape));
  if (has_bias_ && rows > 0) {
    std::copy_n(bias_.value.data(), out_, y.data());
    round_to_precision(std::span<float>(y.data(), out_), precision_);
    for (std::size_t r = 1; r < rows; ++r) std::copy_n(y.data(), out_, y.data() + r * out_);
  }
  gemm(Trans::no, Trans::yes, rows, out_, in_, 1.0f, input_.data(), in_, w, in_,
       has_bias_ ? 1.0f : 0.0f, y.data(), out_);
  round_to_precision(y.span(), precision_);
}

void Linear::backward_into(const Tensor& grad_out, Tensor& dx) {
  if (input_shape_.empty()) {
    throw std::logic_error("Linear::backward called before forward");
  }
  const std::size_t rows = input_.dim(0);
  if (grad_out.numel() != rows * out_) {
    throw std::invalid_argument("Linear::backward: gradient " + to_string(grad_out.shape()) +
                                " does not match the output of input " +
                                to_string(input_shape_) + " (out_features=" +
                                std::to_string(out_) + ")");
  }
  check_grad_storage(weight_);
  const float* g = grad_out.data();
  if (precision_ != Precision::fp32) {
    grad_rounded_.resize({rows, out_});
    std::copy_n(grad_out.data(), grad_out.numel(), grad_rounded_.data());
    round_to_precision(grad_rounded_.span(), precision_);
    g = grad_rounded_.data();
  }

  if (has_bias_) {
    check_grad_storage(bias_);
    // db = column sums of g, computed on their own and then added, as torch's
    // AccumulateGrad adds a finished gradient.
    bias_grad_.resize({out_});
    bias_grad_.zero();
    float* db = bias_grad_.data();
    for (std::size_t r = 0; r < rows; ++r) add_into(db, g + r * out_, out_);
    round_to_precision(bias_grad_.span(), precision_);
    add_into(bias_.grad.data(), db, out_);
    notify_grad_ready(bias_);
  }

  // dW (out, in) = g^T (out, rows) x (rows, in).
  if (precision_ == Precision::fp32) {
    gemm(Trans::yes, Trans::no, out_, in_, rows, 1.0f, g, out_, input_.data(), in_, 1.0f,
         weight_.grad.data(), in_);
  } else {
    weight_grad_.resize({out_, in_});
    gemm(Trans::yes, Trans::no, out_, in_, rows, 1.0f, g, out_, input_.data(), in_, 0.0f,
         weight_grad_.data(), in_);
    round_to_precision(weight_grad_.span(), precision_);
    add_into(weight_.grad.data(), weight_grad_.data(), weight_grad_.numel());
  }
  notify_grad_ready(weight_);

  if (!requires_input_grad_) {
    dx = Tensor();
    return;
  }
  // dX (rows, in) = g (rows, out) W (out, in).
  const float* w =
      forward_precision_ == Precision::fp32 ? weight_.value.data() : weight_used_.data();
  dx.resize(input_shape_);
  gemm(Trans::no, Trans::no, rows, in_, out_, 1.0f, g, out_, w, in_, 0.0f, dx.data(), in_);
  round_to_precision(dx.span(), precision_);
}

}  // namespace mpitrain::nn
