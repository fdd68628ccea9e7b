#pragma once
// The Engine's settings and the loaders' options from a TrainConfig: what `trainer` trains
// with and what `trainer eval` evaluates with, so both see the same shards and precision.

#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/engine/engine_config.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// Returns the EngineConfig of the training.*, distributed.*, data.* and project.* keys.
EngineConfig engine_config(const TrainConfig& config);
// Returns the training loader's options (data.batch_size, shuffle, drop_last, seed).
data::DataLoaderOptions train_loader_options(const TrainConfig& config);
// Returns the test loader's options: the training loader's, in order, keeping every example.
data::DataLoaderOptions test_loader_options(const TrainConfig& config);

}  // namespace mpitrain::app
