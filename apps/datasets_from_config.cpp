#include "datasets_from_config.hpp"

#include <algorithm>
#include <string>

#include "mpitrain/data/hdf5_dataset.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"

namespace mpitrain::app {
namespace {

// Examples [offset, offset + size) of another data set: the synthetic test set is the
// continuation of the training set's index range, so no test example was trained on.
class IndexRange final : public data::Dataset {
 public:
  IndexRange(std::shared_ptr<const data::Dataset> base, std::size_t offset, std::size_t size)
      : base_(std::move(base)), offset_(offset), size_(size) {}
  std::size_t size() const noexcept override { return size_; }
  const Shape& feature_shape() const noexcept override { return base_->feature_shape(); }
  std::optional<std::size_t> num_classes() const noexcept override { return base_->num_classes(); }
  std::string describe() const override {
    return "examples [" + std::to_string(offset_) + ", " + std::to_string(offset_ + size_) +
           ") of " + base_->describe();
  }

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override {
    shifted_.resize(indices.size());
    std::transform(indices.begin(), indices.end(), shifted_.begin(),
                   [this](std::size_t i) { return i + offset_; });
    base_->get_batch(shifted_, features_out, labels_out);
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  std::size_t offset_;
  std::size_t size_;
  mutable std::vector<std::size_t> shifted_;  // scratch; readers need not be thread-safe
};

std::shared_ptr<const data::Dataset> open(const std::string& kind, const DataSource& src) {
  if (kind == "idx") {
    return std::make_shared<data::IdxDataset>(data::IdxPaths{*src.images, *src.labels});
  }
  data::Hdf5DatasetOptions options;
  options.features = *src.features;
  options.labels = *src.labels;
  return std::make_shared<data::Hdf5Dataset>(*src.file, options);
}

}  // namespace

DataSets make_datasets(const TrainConfig& config) {
  DataSets sets;
  if (config.data.kind == "synthetic") {
    const auto& s = config.data.synthetic;
    data::SyntheticOptions o;
    o.size = static_cast<std::size_t>(s.train_size + s.test_size);
    o.feature_dim = static_cast<std::size_t>(s.features);
    o.num_classes = static_cast<std::size_t>(s.classes);
    o.seed = static_cast<std::uint64_t>(config.seed);
    auto all = std::make_shared<const data::SyntheticDataset>(o);
    sets.train = std::make_shared<IndexRange>(all, 0, static_cast<std::size_t>(s.train_size));
    if (s.test_size > 0) {
      sets.test = std::make_shared<IndexRange>(all, static_cast<std::size_t>(s.train_size),
                                               static_cast<std::size_t>(s.test_size));
    }
  } else {
    sets.train = open(config.data.kind, config.data.train);
    const DataSource& t = config.data.test;
    const bool has_test = config.data.kind == "idx" ? t.images.has_value() : t.file.has_value();
    if (has_test) {
      if (config.data.kind == "hdf5" && (!t.features || !t.labels)) {
        throw ConfigError("data.test: hdf5 data needs file, features and labels");
      }
      sets.test = open(config.data.kind, t);
    }
  }
  sets.num_classes = sets.train->num_classes().value_or(0);
  if (sets.num_classes < 2) {
    throw ConfigError("data.train: " + sets.train->describe() + " has fewer than 2 classes");
  }
  if (sets.test) {
    if (sets.test->feature_size() != sets.train->feature_size()) {
      throw ConfigError("data.test: " + sets.test->describe() + " has " +
                        std::to_string(sets.test->feature_size()) +
                        " features per example, the training set " +
                        std::to_string(sets.train->feature_size()));
    }
    sets.num_classes = std::max(sets.num_classes, sets.test->num_classes().value_or(0));
  }
  return sets;
}

}  // namespace mpitrain::app
