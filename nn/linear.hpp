#pragma once
// Linear: y = x W^T + b, torch.nn.Linear. x: (..., in); W: (out, in); b: (out); y: (..., out).
//
// Cost per forward of r = numel(x)/in rows: 2*r*in*out flops (one sgemm); backward: the same
// twice (dW += g^T x, dX = g W; the second is skipped when the input needs no gradient) plus
// r*out adds for db. Copies: x is kept (r*in values) for dW.
// Gradient-ready order: bias, then weight (the reverse of parameters()).
// Mixed precision (DESIGN.md section 3, emulated on CPU): forward uses rounded copies of
// x, W and b, the GEMM accumulates in fp32, and the output is rounded; backward rounds the
// incoming gradient, rounds dW and db before adding them to the fp32 gradients, and
// rounds dX.

#include <cstddef>

#include "mpitrain/nn/module.hpp"
#include "mpitrain/nn/rng.hpp"

namespace mpitrain::nn {

class Linear : public Module {
 public:
  // Weight and bias initialised like torch (linear_default_init) from `rng`.
  Linear(std::size_t in_features, std::size_t out_features, bool bias, Rng& rng);
  // Same, drawing from Rng(0): deterministic, so two layers built this way with the same
  // shape get equal weights; pass an Rng to get independent layers.
  Linear(std::size_t in_features, std::size_t out_features, bool bias = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;
  // Returns {weight, bias} (bias only when present), named "weight" and "bias".
  std::vector<Parameter*> parameters() override;

  // Draws fresh weights and bias like torch's reset_parameters.
  void reset_parameters(Rng& rng);

  std::size_t in_features() const noexcept { return in_; }
  std::size_t out_features() const noexcept { return out_; }
  Parameter& weight() noexcept { return weight_; }
  // Returns the bias, or null when the layer has none.
  Parameter* bias() noexcept { return has_bias_ ? &bias_ : nullptr; }

 private:
  void allocate();  // names and zero-filled value/grad tensors of the parameters

  std::size_t in_;
  std::size_t out_;
  bool has_bias_;
  Parameter weight_;
  Parameter bias_;
  Tensor input_;         // (rows, in): the last forward's input (rounded under bf16/fp16)
  Shape input_shape_;    // its original shape, for dX
  Tensor weight_used_;   // (out, in): rounded copy of W used by forward/backward (bf16/fp16)
  Precision forward_precision_ = Precision::fp32;  // precision of the last forward
  Tensor grad_rounded_;  // (rows, out): rounded incoming gradient (bf16/fp16)
  Tensor weight_grad_;   // (out, in): this backward's dW before rounding (bf16/fp16)
  Tensor bias_grad_;     // (out): this backward's db (fp32 sums, then rounded if bf16/fp16)
};

}  // namespace mpitrain::nn
