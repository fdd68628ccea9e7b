#pragma once
// DataLoader: one rank's batches of a Dataset, epoch after epoch, as BatchSharding plans
// them (Accelerate semantics by default: split_batches, even_batches, drop_last; or the
// torch DistributedSampler recipe), with an exact mid-epoch resume.
//
//   DataLoader loader(dataset, {.batch_size = 64, .seed = 42, .world_size = W, .rank = r});
//   loader.set_epoch(epoch);
//   for (Batch batch; loader.next(batch);) { ... batch.is_last ... }
//
// The epoch's order depends only on (seed, epoch), never on how the loader got there, so
// skip_first_batches(n) or load_state({epoch, n, seed}) continue with exactly the batches an
// uninterrupted epoch would have produced from its n-th on (the bug of Accelerate issues
// #2016 and #3242, where resumed runs saw another order, cannot happen here).
// When next() returns false the epoch is over and the loader stands at the start of the
// next epoch (epoch + 1, position 0), so a plain loop over next() walks through epochs the
// way torch's DataLoader does with set_epoch(e) before each one.
// Cost: the first next() of an epoch computes the epoch's plan, O(n) time and memory;
// each batch costs one Dataset::get_batch of its indices.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mpitrain/data/batch_sharding.hpp"
#include "mpitrain/data/dataset.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::data {

struct DataLoaderOptions {
  std::size_t batch_size = 64;  // per rank; the global batch when split_batches
  bool shuffle = true;
  std::uint64_t seed = 0;  // the epoch's shuffle seed is seed + epoch
  bool drop_last = false;
  bool split_batches = false;
  bool even_batches = true;
  std::size_t world_size = 1;
  std::size_t rank = 0;
  ShardingMode mode = ShardingMode::accelerate;
};

// Returns the sharding a loader with `options` over `dataset_size` examples uses.
ShardingOptions sharding_options(std::size_t dataset_size, const DataLoaderOptions& options);

struct Batch {
  Tensor features;               // (batch, feature_size), owning
  std::vector<std::int32_t> labels;  // (batch)
  std::vector<std::size_t> indices;  // (batch) dataset index of each row
  std::size_t real_count = 0;        // leading rows that are real; the rest are padding duplicates
  std::size_t position = 0;          // this batch's number within the rank's epoch, from 0
  bool is_last = false;              // the last batch of this rank's epoch
};

// Where a loader stands; what a checkpoint stores under /data.
struct LoaderState {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // batches already consumed in this epoch
  std::uint64_t seed = 0;
};

class DataLoader {
 public:
  // Throws std::invalid_argument as BatchSharding does (world, rank, batch_size, split).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);

  const Dataset& dataset() const noexcept { return *dataset_; }
  const DataLoaderOptions& options() const noexcept { return options_; }
  const BatchSharding& sharding() const noexcept { return sharding_; }

  // Starts `epoch` from its first batch.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const noexcept { return epoch_; }
  // Returns the batches already consumed in the current epoch.
  std::size_t position() const noexcept { return position_; }
  // Returns this rank's batches per epoch (the same on every rank unless even_batches=false).
  std::size_t batches_per_epoch() const noexcept { return sharding_.num_batches(); }
  // Returns the real (non-duplicate) examples all ranks read together per epoch.
  std::size_t real_samples_per_epoch() const noexcept { return sharding_.real_samples_per_epoch(); }
  // Returns true when the batch next() returned last was the last of the epoch (and no
  // other next() has been called since).
  bool end_of_epoch() const noexcept { return position_ == batches_per_epoch(); }

  // Makes the next batch batch number `n` of the current epoch, keeping the epoch and its
  // order (mid-epoch resume). Throws std::out_of_range when n > batches_per_epoch().
  void skip_first_batches(std::size_t n);

  // Reads the next batch into `out` (reusing its buffers when the shapes match) and returns
  // true; at the end of the epoch returns false, leaves `out` unchanged, and moves to the
  // start of epoch + 1.
  bool next(Batch& out);

  LoaderState state() const noexcept;
  // Continues from `state`: its seed, epoch and position. Throws std::out_of_range when the
  // position is negative or beyond batches_per_epoch().
  void load_state(const LoaderState& state);

 private:
  const EpochBatches& plan();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  BatchSharding sharding_;
  std::int64_t epoch_ = 0;
  std::size_t position_ = 0;
  std::optional<EpochBatches> plan_;  // the current epoch's batches, computed on first use
};

}  // namespace mpitrain::data
