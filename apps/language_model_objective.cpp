#include "language_model_objective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace mpitrain::app {

float LanguageModelObjective::loss(const Tensor&, const data::Batch&, Tensor&) const {
  throw std::logic_error("LanguageModelObjective::loss: a language model computes its own training loss");
}

void LanguageModelObjective::score(const Tensor& output, const data::Batch& batch, std::vector<float>& rows) const {
  const std::size_t width = batch.features.dim(1);  // block_size + 1
  const std::size_t block = width - 1;
  if (output.numel() != output.dim(0) * block * vocab_) {
    throw std::logic_error(fmt::format("LanguageModelObjective::score: output of {} values for {} windows of {}",
                                       output.numel(), output.dim(0), block));
  }
  for (std::size_t r = 0; r < batch.real_count; ++r) {
    const float* window = batch.features.data() + r * width;
    double sum = 0.0;
    for (std::size_t t = 0; t < block; ++t) {
      const float* z = output.data() + (r * block + t) * vocab_;
      const float top = *std::max_element(z, z + vocab_);
      double exp_sum = 0.0;
      for (std::size_t k = 0; k < vocab_; ++k) exp_sum += std::exp(static_cast<double>(z[k] - top));
      const auto target = static_cast<std::size_t>(window[t + 1]);
      sum += std::log(exp_sum) + static_cast<double>(top - z[target]);
    }
    const double nats = sum / static_cast<double>(block);
    rows.push_back(static_cast<float>(nats));
    rows.push_back(static_cast<float>(nats / std::numbers::ln2));
  }
}

std::string LanguageModelObjective::describe_metric(double mean) const {
  return fmt::format("{:.4f} bits per {} (perplexity {:.2f})", mean, unit_, std::exp2(mean));
}

}  // namespace mpitrain::app
