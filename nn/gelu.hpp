#pragma once
// GELU, exact form (torch.nn.GELU(approximate='none'), torch's default):
// y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))). Any shape.
//
// Cost: one erf per value forward, one exp per value backward:
// dx = g * (Phi(x) + x * phi(x)), phi the standard normal density. x and Phi(x) are kept.
// erf is evaluated as torch's vectorised CPU kernel does (Abramowitz & Stegun 7.1.26,
// erf_as in fast_math.hpp, |error| <= 6e-7), in loops the compiler vectorises.
// No parameters. Under bf16/fp16 the output and dx are rounded.

#include "mpitrain/nn/module.hpp"

namespace mpitrain::nn {

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;

 private:
  Tensor input_;  // the last forward's input (rounded under bf16/fp16)
  Tensor cdf_;    // Phi(input_), for backward
};

}  // namespace mpitrain::nn
