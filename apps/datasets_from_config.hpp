#pragma once
// The trainer's data sets from the `data.*` keys: IDX files (Fashion-MNIST by default), an
// HDF5 file (features and labels datasets, read by hyperslab), or a synthetic problem whose
// test set holds examples the training set does not.

#include <memory>

#include "mpitrain/data/dataset.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

struct DataSets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> test;  // null when there is no test set
  std::size_t num_classes = 0;
};

// Returns the training and test sets. Throws ConfigError when the two disagree on the
// feature size or the number of classes, and the readers' std::runtime_error (naming the
// file and what is wrong) for unreadable or malformed files.
DataSets make_datasets(const TrainConfig& config);

}  // namespace mpitrain::app
