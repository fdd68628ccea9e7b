#include "mpitrain/data/dataset.hpp"

#include <stdexcept>

namespace mpitrain::data {

void Dataset::get(std::size_t index, std::span<float> features_out, std::int32_t& label_out) const {
  get_batch(std::span<const std::size_t>(&index, 1), features_out,
            std::span<std::int32_t>(&label_out, 1));
}

void Dataset::get_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                        std::span<std::int32_t> labels_out) const {
  const std::size_t n = indices.size();
  const std::size_t d = feature_size();
  if (features_out.size() != n * d) {
    throw std::invalid_argument("Dataset::get_batch: features_out has " +
                                std::to_string(features_out.size()) + " values, expected " +
                                std::to_string(n) + " x " + std::to_string(d) + " (" + describe() +
                                ")");
  }
  if (labels_out.size() != n) {
    throw std::invalid_argument("Dataset::get_batch: labels_out has " +
                                std::to_string(labels_out.size()) + " values, expected " +
                                std::to_string(n) + " (" + describe() + ")");
  }
  const std::size_t count = size();
  for (std::size_t i = 0; i < n; ++i) {
    if (indices[i] >= count) {
      throw std::out_of_range("Dataset::get_batch: index " + std::to_string(indices[i]) +
                              " (position " + std::to_string(i) + " of the batch) is out of " +
                              "range for " + std::to_string(count) + " examples (" + describe() +
                              ")");
    }
  }
  if (n == 0) return;
  read_batch(indices, features_out, labels_out);
}

}  // namespace mpitrain::data
