#pragma once
// SyntheticDataset: a seeded, learnable classification problem computed on the fly, for
// tests, benchmarks and runs without data files. Example i has
//   label    = h(seed, LABEL, i, 0) mod classes
//   features = centre[label] + noise_std * z,  z_j ~ N(0, 1) by Box-Muller from h(seed, NOISE, i,
//   j)
// where centre[c]_j is uniform in [-center_scale, center_scale) from h(seed, CENTRE, c, j),
// and h is a counter-based hash (SplitMix64's finaliser chained over its arguments). Every
// value depends only on (seed, index), so any rank reads any index, in any order, and gets
// the same numbers (on the same libm: std::log/std::cos may differ in the last bit across
// C libraries). The classes are Gaussian blobs around separated centres: the defaults give
// a nearest-centre accuracy near 100%, so a model trained on them makes visible progress.
// Cost: O(d) per example, O(classes * d) memory for the centres.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/data/dataset.hpp"

namespace mpitrain::data {

struct SyntheticOptions {
  std::size_t size = 1024;       // examples
  std::size_t feature_dim = 32;  // values per example
  std::size_t num_classes = 4;
  std::uint64_t seed = 0;
  float center_scale = 1.0f;  // half-width of the box the class centres are drawn from
  float noise_std = 0.5f;     // standard deviation of each feature around its centre
};

class SyntheticDataset final : public Dataset {
 public:
  // Throws std::invalid_argument when feature_dim or num_classes is 0, num_classes exceeds
  // 2^31, or noise_std / center_scale is negative or not finite.
  explicit SyntheticDataset(SyntheticOptions options);

  std::size_t size() const noexcept override { return options_.size; }
  const Shape& feature_shape() const noexcept override { return feature_shape_; }
  std::optional<std::size_t> num_classes() const noexcept override { return options_.num_classes; }
  std::string describe() const override;

  const SyntheticOptions& options() const noexcept { return options_; }
  // Returns class c's centre (feature_dim values).
  std::span<const float> center(std::size_t c) const;

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override;

 private:
  SyntheticOptions options_;
  Shape feature_shape_;
  std::vector<float> centers_;  // (classes, feature_dim)
};

}  // namespace mpitrain::data
