// SyntheticDataset: deterministic per (seed, index), independent of batch order, labels in
// range and balanced, features distributed around their class centre, and learnable.

#include "mpitrain/data/synthetic_dataset.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace mpitrain::data {
namespace {

struct Read {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
};

Read read(const Dataset& dataset, const std::vector<std::size_t>& indices) {
  Read r{std::vector<float>(indices.size() * dataset.feature_size()),
         std::vector<std::int32_t>(indices.size())};
  dataset.get_batch(indices, r.features, r.labels);
  return r;
}

std::vector<std::size_t> range(std::size_t begin, std::size_t end) {
  std::vector<std::size_t> v(end - begin);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

TEST(SyntheticDataset, SameSeedSameValuesInAnyOrder) {
  SyntheticOptions o;
  o.size = 100;
  o.seed = 7;
  const SyntheticDataset a(o);
  const SyntheticDataset b(o);  // another "rank"
  const Read forward = read(a, range(0, 100));
  const Read again = read(b, range(0, 100));
  EXPECT_EQ(forward.features, again.features);
  EXPECT_EQ(forward.labels, again.labels);

  const std::vector<std::size_t> shuffled{93, 4, 4, 57, 0};
  const Read picked = read(b, shuffled);
  const std::size_t d = a.feature_size();
  for (std::size_t r = 0; r < shuffled.size(); ++r) {
    EXPECT_EQ(picked.labels[r], forward.labels[shuffled[r]]);
    for (std::size_t j = 0; j < d; ++j) {
      EXPECT_EQ(picked.features[r * d + j], forward.features[shuffled[r] * d + j]);
    }
  }

  o.seed = 8;
  const Read other = read(SyntheticDataset(o), range(0, 100));
  EXPECT_NE(other.features, forward.features);
  EXPECT_NE(other.labels, forward.labels);
}

TEST(SyntheticDataset, ShapeAndValidation) {
  SyntheticOptions o;
  o.size = 5;
  o.feature_dim = 3;
  o.num_classes = 2;
  const SyntheticDataset dataset(o);
  EXPECT_EQ(dataset.size(), 5u);
  EXPECT_EQ(dataset.feature_shape(), Shape({3}));
  EXPECT_EQ(dataset.num_classes(), std::optional<std::size_t>(2));
  EXPECT_EQ(dataset.center(1).size(), 3u);
  EXPECT_THROW(dataset.center(2), std::out_of_range);
  std::vector<float> f(3);
  std::int32_t label = 0;
  EXPECT_THROW(dataset.get(5, f, label), std::out_of_range);
  o.feature_dim = 0;
  EXPECT_THROW(SyntheticDataset{o}, std::invalid_argument);
  o.feature_dim = 3;
  o.num_classes = 0;
  EXPECT_THROW(SyntheticDataset{o}, std::invalid_argument);
  o.num_classes = 2;
  o.noise_std = -1.0f;
  EXPECT_THROW(SyntheticDataset{o}, std::invalid_argument);
}

TEST(SyntheticDataset, LabelsBalancedAndNoiseAsSpecified) {
  SyntheticOptions o;
  o.size = 8000;
  o.feature_dim = 16;
  o.num_classes = 4;
  o.noise_std = 0.5f;
  o.seed = 3;
  const SyntheticDataset dataset(o);
  const Read all = read(dataset, range(0, o.size));
  std::vector<std::size_t> per_class(o.num_classes, 0);
  double sum = 0, sum_sq = 0;
  for (std::size_t i = 0; i < o.size; ++i) {
    const auto c = static_cast<std::size_t>(all.labels[i]);
    ASSERT_LT(c, o.num_classes);
    ++per_class[c];
    const auto centre = dataset.center(c);
    for (std::size_t j = 0; j < o.feature_dim; ++j) {
      const double z = all.features[i * o.feature_dim + j] - centre[j];
      sum += z;
      sum_sq += z * z;
    }
  }
  // Each class has probability 1/4: 2000 +- 4.5 standard deviations (about 40).
  for (std::size_t c = 0; c < o.num_classes; ++c) {
    EXPECT_NEAR(static_cast<double>(per_class[c]), 2000.0, 180.0) << c;
  }
  const double values = static_cast<double>(o.size * o.feature_dim);
  EXPECT_NEAR(sum / values, 0.0, 0.01);  // standard error 0.5 / sqrt(128000) = 0.0014
  EXPECT_NEAR(std::sqrt(sum_sq / values), 0.5, 0.01);
  for (std::size_t c = 0; c < o.num_classes; ++c) {
    for (float v : dataset.center(c)) {
      EXPECT_GE(v, -o.center_scale);
      EXPECT_LT(v, o.center_scale);
    }
  }
}

// A classifier fitted on the first half (class means) labels the second half correctly:
// training on this data makes progress.
TEST(SyntheticDataset, ClassesAreLearnable) {
  SyntheticOptions o;  // defaults: 32 features, 4 classes, noise 0.5
  o.size = 4000;
  const SyntheticDataset dataset(o);
  const std::size_t d = o.feature_dim, k = o.num_classes;
  const Read train = read(dataset, range(0, 2000));
  const Read test = read(dataset, range(2000, 4000));
  std::vector<double> mean(k * d, 0.0);
  std::vector<double> count(k, 0.0);
  for (std::size_t i = 0; i < 2000; ++i) {
    const auto c = static_cast<std::size_t>(train.labels[i]);
    count[c] += 1;
    for (std::size_t j = 0; j < d; ++j) mean[c * d + j] += train.features[i * d + j];
  }
  for (std::size_t c = 0; c < k; ++c) {
    ASSERT_GT(count[c], 0.0);
    for (std::size_t j = 0; j < d; ++j) mean[c * d + j] /= count[c];
  }
  std::size_t correct = 0;
  for (std::size_t i = 0; i < 2000; ++i) {
    std::size_t best = 0;
    double best_dist = 1e300;
    for (std::size_t c = 0; c < k; ++c) {
      double dist = 0;
      for (std::size_t j = 0; j < d; ++j) {
        const double diff = test.features[i * d + j] - mean[c * d + j];
        dist += diff * diff;
      }
      if (dist < best_dist) best_dist = dist, best = c;
    }
    correct += best == static_cast<std::size_t>(test.labels[i]) ? 1 : 0;
  }
  EXPECT_GT(static_cast<double>(correct) / 2000.0, 0.95);  // chance: 0.25
}

}  // namespace
}  // namespace mpitrain::data
