#pragma once
// Softmax cross-entropy from logits, torch.nn.functional.cross_entropy(logits, labels)
// with reduction='mean' (no weights, no label smoothing, no ignore_index).
//
// loss = mean_b [ logsumexp(logits[b, :]) - logits[b, labels[b]] ]; the log-sum-exp
// subtracts each row's maximum, so large logits do not overflow.
// grad[b, c] = (softmax(logits[b, :])[c] - [c == labels[b]]) / batch.
// Cost: one exp per logit, three passes over (batch, classes). Computed in fp32 (as autocast
// does) whatever the model's precision; the sum over the batch is accumulated in double.
// A batch of 0 rows gives loss NaN (torch's mean of nothing) and an empty gradient.

#include <cstdint>
#include <span>

#include "mpitrain/nn/loss_result.hpp"

namespace mpitrain::nn {

// Returns the mean loss and d(loss)/d(logits). logits: (batch, classes); labels: batch
// class indices. Throws std::invalid_argument for mismatched sizes or a label outside
// [0, classes), naming the row and the value.
LossResult cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels);
// Same, writing the gradient into `grad` (resized if needed) so a training loop can reuse
// it; returns the mean loss.
float cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels, Tensor& grad);

}  // namespace mpitrain::nn
