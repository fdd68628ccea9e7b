#pragma once
// ReLU: y = max(x, 0) elementwise, torch.nn.ReLU. Any shape; NaN propagates as in torch.
//
// Cost: one pass forward (plus a copy of y kept for backward), one pass backward:
// dx = g where y > 0, else 0. No parameters. Under bf16/fp16 the output and dx are rounded.

#include "mpitrain/nn/module.hpp"

namespace mpitrain::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;

 private:
  Tensor output_;  // the last forward's output, same shape as x
};

}  // namespace mpitrain::nn
