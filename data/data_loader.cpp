#include "mpitrain/data/data_loader.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace mpitrain::data {
namespace {

ShardingOptions checked_sharding_options(const Dataset* dataset, const DataLoaderOptions& o) {
  if (dataset == nullptr) throw std::invalid_argument("DataLoader: the dataset is null");
  return sharding_options(dataset->size(), o);
}

}  // namespace

ShardingOptions sharding_options(std::size_t dataset_size, const DataLoaderOptions& o) {
  ShardingOptions s;
  s.dataset_size = dataset_size;
  s.world_size = o.world_size;
  s.rank = o.rank;
  s.batch_size = o.batch_size;
  s.shuffle = o.shuffle;
  s.seed = o.seed;
  s.drop_last = o.drop_last;
  s.split_batches = o.split_batches;
  s.even_batches = o.even_batches;
  s.mode = o.mode;
  return s;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)),
      options_(options),
      sharding_(checked_sharding_options(dataset_.get(), options_)) {}

void DataLoader::set_epoch(std::int64_t epoch) {
  if (epoch != epoch_) plan_.reset();
  epoch_ = epoch;
  position_ = 0;
}

void DataLoader::skip_first_batches(std::size_t n) {
  if (n > batches_per_epoch()) {
    throw std::out_of_range("DataLoader::skip_first_batches: " + std::to_string(n) +
                            " batches requested, but epoch " + std::to_string(epoch_) + " has " +
                            std::to_string(batches_per_epoch()) + " on rank " +
                            std::to_string(options_.rank));
  }
  position_ = n;
}

const EpochBatches& DataLoader::plan() {
  if (!plan_) plan_ = sharding_.epoch_batches(epoch_);
  return *plan_;
}

bool DataLoader::next(Batch& out) {
  const std::size_t count = batches_per_epoch();
  if (position_ >= count) {
    set_epoch(epoch_ + 1);
    return false;
  }
  const EpochBatches& p = plan();
  const std::vector<std::size_t>& indices = p.batches[position_];
  const std::size_t rows = indices.size();
  const std::size_t d = dataset_->feature_size();
  const Shape shape{rows, d};
  if (out.features.is_view() || out.features.shape() != shape) out.features = Tensor(shape);
  out.labels.resize(rows);
  dataset_->get_batch(indices, out.features.span(), out.labels);
  out.indices = indices;
  out.real_count = p.real_counts[position_];
  out.position = position_;
  ++position_;
  out.is_last = position_ == count;
  return true;
}

LoaderState DataLoader::state() const noexcept {
  return {epoch_, static_cast<std::int64_t>(position_), options_.seed};
}

void DataLoader::load_state(const LoaderState& state) {
  // The batch count does not depend on the seed, so check before changing anything.
  if (state.position < 0 || static_cast<std::size_t>(state.position) > batches_per_epoch()) {
    throw std::out_of_range("DataLoader::load_state: position " + std::to_string(state.position) +
                            " is outside [0, " + std::to_string(batches_per_epoch()) +
                            "] for epoch " + std::to_string(state.epoch) + " on rank " +
                            std::to_string(options_.rank));
  }
  if (state.seed != options_.seed) {
    DataLoaderOptions changed = options_;
    changed.seed = state.seed;
    sharding_ = BatchSharding(sharding_options(dataset_->size(), changed));
    options_ = changed;
    plan_.reset();
  }
  set_epoch(state.epoch);
  position_ = static_cast<std::size_t>(state.position);
}

}  // namespace mpitrain::data
