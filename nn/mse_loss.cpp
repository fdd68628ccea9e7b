#include "mpitrain/nn/mse_loss.hpp"

#include <limits>
#include <stdexcept>

namespace mpitrain::nn {

LossResult mse_loss(const Tensor& prediction, const Tensor& target) {
  LossResult r;
  r.loss = mse_loss(prediction, target, r.grad);
  return r;
}

float mse_loss(const Tensor& prediction, const Tensor& target, Tensor& grad) {
  if (prediction.shape() != target.shape()) {
    throw std::invalid_argument("mse_loss: prediction " + to_string(prediction.shape()) +
                                " and target " + to_string(target.shape()) + " differ");
  }
  grad.resize(prediction.shape());
  const std::size_t n = prediction.numel();
  if (n == 0) return std::numeric_limits<float>::quiet_NaN();
  const float* p = prediction.data();
  const float* t = target.data();
  float* g = grad.data();
  const float two_over_n = 2.0f / static_cast<float>(n);
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = p[i] - t[i];
    total += static_cast<double>(d) * d;
    g[i] = two_over_n * d;
  }
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace mpitrain::nn
