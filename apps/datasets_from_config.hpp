#pragma once
// The trainer's data sets from the `data.*` keys: IDX files (Fashion-MNIST by default), an
// HDF5 file (features and labels datasets, read by hyperslab), a synthetic problem whose
// test set holds examples the training set does not, or a language model's windows of tokens:
// the bytes of text files (data.text) or the uint16 ids of llm.c's token shards
// (data.tokens; num_classes = data.tokens.vocab_size, every token checked against it).

#include <memory>

#include "mpitrain/data/dataset.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

struct DataSets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> test;  // null when there is no test set
  std::size_t num_classes = 0;  // the model's outputs
};

// Returns the training and test sets, with num_classes = data.classes when set (every label
// checked against it by the readers), otherwise derived (idx 10, hdf5 the largest label + 1 of
// both sets, synthetic its own). Throws ConfigError naming the key: the two sets disagree on
// the feature size, fewer than 2 classes, or a reader's complaint (missing or malformed file,
// a label out of range with its example's index, naming the file).
DataSets make_datasets(const TrainConfig& config);

}  // namespace mpitrain::app
