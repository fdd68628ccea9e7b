#include "mpitrain/data/synthetic_dataset.hpp"

#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

namespace mpitrain::data {
namespace {

enum Stream : std::uint64_t { kLabel = 1, kCentre = 2, kNoise = 3 };

std::uint64_t mix64(std::uint64_t x) {  // SplitMix64 finaliser: a bijection with avalanche
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Returns a 64-bit hash of (seed, stream, a, b); each argument passes through a full
// avalanche before the next one enters.
std::uint64_t counter_hash(std::uint64_t seed, std::uint64_t stream, std::uint64_t a,
                           std::uint64_t b) {
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  std::uint64_t h = mix64(seed + kGolden);
  h = mix64(h ^ (stream * kGolden));
  h = mix64(h ^ (a + kGolden));
  return mix64(h ^ (b * kGolden + 1));
}

// Returns a uniform value in (0, 1) from 32 bits.
double open_unit(std::uint32_t bits) { return (static_cast<double>(bits) + 0.5) * 0x1p-32; }

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticOptions options) : options_(options) {
  if (options.feature_dim == 0) throw std::invalid_argument("SyntheticDataset: feature_dim is 0");
  if (options.num_classes == 0 ||
      options.num_classes > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("SyntheticDataset: num_classes must be in [1, 2^31 - 1], got " +
                                std::to_string(options.num_classes));
  }
  if (!std::isfinite(options.noise_std) || options.noise_std < 0.0f ||
      !std::isfinite(options.center_scale) || options.center_scale < 0.0f) {
    throw std::invalid_argument(
        "SyntheticDataset: noise_std and center_scale must be finite "
        "and >= 0");
  }
  feature_shape_ = {options.feature_dim};
  centers_.resize(options.num_classes * options.feature_dim);
  for (std::size_t c = 0; c < options.num_classes; ++c) {
    for (std::size_t j = 0; j < options.feature_dim; ++j) {
      const std::uint64_t h = counter_hash(options.seed, kCentre, c, j);
      const double u = static_cast<double>(h >> 11) * 0x1p-53;  // [0, 1)
      centers_[c * options.feature_dim + j] =
          static_cast<float>((2.0 * u - 1.0) * options.center_scale);
    }
  }
}

std::string SyntheticDataset::describe() const {
  return "synthetic data set (" + std::to_string(options_.size) + " examples, " +
         std::to_string(options_.feature_dim) + " features, " +
         std::to_string(options_.num_classes) + " classes, seed " + std::to_string(options_.seed) +
         ")";
}

std::span<const float> SyntheticDataset::center(std::size_t c) const {
  if (c >= options_.num_classes) {
    throw std::out_of_range("SyntheticDataset::center: class " + std::to_string(c) + " of " +
                            std::to_string(options_.num_classes));
  }
  return {centers_.data() + c * options_.feature_dim, options_.feature_dim};
}

void SyntheticDataset::read_batch(std::span<const std::size_t> indices,
                                  std::span<float> features_out,
                                  std::span<std::int32_t> labels_out) const {
  const std::size_t d = options_.feature_dim;
  const double noise = options_.noise_std;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::size_t index = indices[i];
    const std::size_t label = counter_hash(options_.seed, kLabel, index, 0) % options_.num_classes;
    labels_out[i] = static_cast<std::int32_t>(label);
    const float* centre = centers_.data() + label * d;
    float* out = features_out.data() + i * d;
    for (std::size_t j = 0; j < d; ++j) {
      const std::uint64_t h = counter_hash(options_.seed, kNoise, index, j);
      const double u1 = open_unit(static_cast<std::uint32_t>(h >> 32));
      const double u2 = open_unit(static_cast<std::uint32_t>(h));
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      out[j] = centre[j] + static_cast<float>(noise * z);
    }
  }
}

}  // namespace mpitrain::data
