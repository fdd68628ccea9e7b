#pragma once
// Tanh: y = tanh(x) elementwise, torch.nn.Tanh. Any shape.
//
// Cost: one tanh per value forward (y is kept), one pass backward: dx = g * (1 - y^2).
// tanh is tanh_fast (fast_math.hpp, within 3 ulp), in a loop the compiler vectorises.
// No parameters. Under bf16/fp16 the output and dx are rounded.

#include "mpitrain/nn/module.hpp"

namespace mpitrain::nn {

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;

 private:
  Tensor output_;  // the last forward's output
};

}  // namespace mpitrain::nn
