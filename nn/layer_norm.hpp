#pragma once
// LayerNorm over the last dimension, torch.nn.LayerNorm(normalized_shape = D, eps,
// elementwise_affine). x: (..., D); y = (x - mean) / sqrt(var + eps) * weight + bias, with
// the biased variance of each row of D values.
//
// Cost: three passes forward (mean, variance, normalise; row sums in double), three backward:
// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = g * weight;
// dweight += sum over rows of g * xhat; dbias += sum over rows of g. xhat and 1/std are kept.
// Parameters "weight" (D, ones) and "bias" (D, zeros) when elementwise_affine.
// Gradient-ready order: bias, then weight (the reverse of parameters()).
// Under bf16/fp16 the statistics are computed in fp32 from the rounded input (as autocast
// runs layer_norm in fp32); the output, dx and the parameter gradients are rounded.

#include <cstddef>

#include "mpitrain/nn/module.hpp"

namespace mpitrain::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::size_t normalized_size, float eps = 1e-5f,
                     bool elementwise_affine = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;
  // Returns {weight, bias} when elementwise_affine, else nothing.
  std::vector<Parameter*> parameters() override;

  std::size_t normalized_size() const noexcept { return size_; }
  float eps() const noexcept { return eps_; }
  Parameter& weight() noexcept { return weight_; }
  Parameter& bias() noexcept { return bias_; }

 private:
  std::size_t size_;
  float eps_;
  bool affine_;
  Parameter weight_;
  Parameter bias_;
  Shape shape_;          // the last forward's input shape
  Tensor xhat_;          // (rows, D): normalised input
  Tensor rstd_;          // (rows): 1 / sqrt(var + eps)
  Tensor weight_grad_;   // (D): this backward's dweight before it is added
  Tensor bias_grad_;     // (D): this backward's dbias before it is added
  Tensor dxhat_;         // (D): scratch for one row
};

}  // namespace mpitrain::nn
