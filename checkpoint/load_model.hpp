#pragma once
// load_model: weights in, the counterpart of save_model (save_model.hpp). Reads
//   <file>.safetensors  F32 tensors (safetensors.hpp), any __metadata__
//   <file>.h5           every float32 dataset under the root, at any depth ("encoder/0.weight"
//                       for /encoder/0.weight), each with the Fletcher32 checksum filter as
//                       save_model writes it (0-d datasets excepted, see h5_file.hpp)
//   <checkpoint dir>    a committed trainer/engine checkpoint folder (checkpoint_<N>, holding
//                       MANIFEST.json): its files are verified against the manifest (sizes
//                       and XXH3-128) before HDF5 opens state.h5, whose /model group is read.
//                       Nothing else of the checkpoint (optimizer, scheduler, data position)
//                       is needed or touched.
// and copies the weights into the given tensors after checking, before anything is copied,
// that the file holds exactly the names asked for (no missing, no extra tensor) and that every
// shape matches. Errors (CheckpointError) name the tensor, the file and both shapes:
//   load_model: tensor '0.weight' has shape [10, 128] in 'run/model.h5', but [10, 256] in the model
//   load_model: tensor '4.bias' of the model is missing from 'run/model.h5'
//   load_model: 'run/model.h5' holds tensor 'extra' that the model does not have
// A file of another dtype than float32 is refused by the readers, naming the file and the
// tensor. Not collective: every rank that needs the weights reads the file (or rank 0 reads
// it and the engine's prepare() broadcasts them).
// Cost: one read of the file (plus one hashing pass over a checkpoint folder's files).

#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::checkpoint {

// A tensor to fill, under its name (a PyTorch state_dict() name such as "0.weight"). Not
// owned: it must outlive the call.
struct WeightsSlot {
  std::string name;
  Tensor* tensor = nullptr;
};

// Returns every weight that `path` (a .h5 or .safetensors file, or a checkpoint folder)
// holds, by name. Throws CheckpointError naming the path for anything else.
std::map<std::string, Tensor> read_model(const std::filesystem::path& path);

// Fills `into` from `path` (see above); names must be unique and no tensor null
// (std::invalid_argument).
void load_model(const std::filesystem::path& path, std::span<const WeightsSlot> into);

}  // namespace mpitrain::checkpoint
