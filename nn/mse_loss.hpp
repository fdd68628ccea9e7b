#pragma once
// Mean squared error, torch.nn.functional.mse_loss(prediction, target) with
// reduction='mean': loss = mean_i (p_i - t_i)^2, grad_i = 2 (p_i - t_i) / n.
// Cost: one pass over n values; the sum is accumulated in double. Any shape, both the same.
// n = 0 gives loss NaN (torch's mean of nothing) and an empty gradient.

#include "mpitrain/nn/loss_result.hpp"

namespace mpitrain::nn {

// Returns the mean loss and d(loss)/d(prediction); throws std::invalid_argument naming both
// shapes if they differ.
LossResult mse_loss(const Tensor& prediction, const Tensor& target);
// Same, writing the gradient into `grad` (resized if needed); returns the mean loss.
float mse_loss(const Tensor& prediction, const Tensor& target, Tensor& grad);

}  // namespace mpitrain::nn
