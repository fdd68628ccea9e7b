#include "classification_objective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "mpitrain/nn/cross_entropy_loss.hpp"

namespace mpitrain::app {

float ClassificationObjective::loss(const Tensor& output, const data::Batch& batch,
                                    Tensor& grad) const {
  return nn::cross_entropy(output, batch.labels, grad);
}

void ClassificationObjective::score(const Tensor& output, const data::Batch& batch,
                                    std::vector<float>& rows) const {
  const std::size_t classes = output.dim(1);
  for (std::size_t r = 0; r < batch.real_count; ++r) {
    const float* z = output.data() + r * classes;
    const std::size_t best = static_cast<std::size_t>(std::max_element(z, z + classes) - z);
    double sum = 0.0;
    for (std::size_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(z[k] - z[best]));
    const auto label = static_cast<std::size_t>(batch.labels[r]);
    rows.push_back(static_cast<float>(std::log(sum) + static_cast<double>(z[best] - z[label])));
    rows.push_back(best == label ? 1.0f : 0.0f);
  }
}

std::string ClassificationObjective::describe_metric(double mean) const {
  return fmt::format("accuracy {:.2f}%", 100.0 * mean);
}

}  // namespace mpitrain::app
