#pragma once
// LossResult: what a loss function returns.

#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn {

struct LossResult {
  float loss = 0.0f;  // the reduced (mean) loss
  Tensor grad;        // d(loss)/d(input), same shape as the input
};

}  // namespace mpitrain::nn
