#include "mpitrain/nn/cross_entropy_loss.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace mpitrain::nn {

LossResult cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels) {
  LossResult r;
  r.loss = cross_entropy(logits, labels, r.grad);
  return r;
}

float cross_entropy(const Tensor& logits, std::span<const std::int32_t> labels, Tensor& grad) {
  if (logits.rank() != 2 || logits.dim(0) != labels.size()) {
    throw std::invalid_argument("cross_entropy: logits " + to_string(logits.shape()) +
                                " must be (batch, classes) with batch = " +
                                std::to_string(labels.size()) + " labels");
  }
  const std::size_t batch = logits.dim(0);
  const std::size_t classes = logits.dim(1);
  for (std::size_t b = 0; b < batch; ++b) {
    if (labels[b] < 0 || static_cast<std::size_t>(labels[b]) >= classes) {
      throw std::invalid_argument("cross_entropy: label " + std::to_string(labels[b]) +
                                  " of row " + std::to_string(b) + " is not in [0, " +
                                  std::to_string(classes) + ")");
    }
  }
  grad.resize(logits.shape());
  if (batch == 0) return std::numeric_limits<float>::quiet_NaN();
  const float inv_batch = 1.0f / static_cast<float>(batch);
  double total = 0.0;
  for (std::size_t b = 0; b < batch; ++b) {
    const float* x = logits.data() + b * classes;
    float* g = grad.data() + b * classes;
    const float m = *std::max_element(x, x + classes);
    float sum = 0.0f;
    for (std::size_t c = 0; c < classes; ++c) {
      g[c] = std::exp(x[c] - m);
      sum += g[c];
    }
    const float lse = m + std::log(sum);
    const auto label = static_cast<std::size_t>(labels[b]);
    total += static_cast<double>(lse - x[label]);
    const float scale = inv_batch / sum;
    for (std::size_t c = 0; c < classes; ++c) g[c] *= scale;
    g[label] -= inv_batch;
  }
  return static_cast<float>(total / static_cast<double>(batch));
}

}  // namespace mpitrain::nn
