#pragma once
// save_model: the trained weights alone, with PyTorch names and shapes, for use outside
// mpitrain:
//   hdf5         <dir>/model.h5           one float32 dataset "/<name>" per parameter
//                                          (h5py: {k: f[k][()] for k in f}, nested names
//                                          such as "encoder/0.weight" become subgroups)
//   safetensors  <dir>/model.safetensors  see safetensors.hpp (torch: safetensors.torch.load_file),
//                                          with __metadata__ {"format": "pt"} as PyTorch writes it
// load_model.hpp reads both back.
// The file is written under a temporary name, fsynced, then renamed over any previous one,
// so a crash leaves the old file or the new one, never a mix. Not collective: call it on
// one rank.

#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "mpitrain/tensor/named_tensor.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::checkpoint {

enum class ModelFormat : std::uint8_t { hdf5, safetensors };

// Returns "hdf5" or "safetensors".
std::string_view to_string(ModelFormat format) noexcept;
// Returns the format named `name` ("h5" or "hdf5", "safetensors"); throws
// std::invalid_argument listing the valid names.
ModelFormat parse_model_format(std::string_view name);

// Returns the written file. Names must be unique and no tensor null (std::invalid_argument).
// A model's parameters give this list through nn::named_tensors(params).
std::filesystem::path save_model(const std::filesystem::path& dir,
                                 std::span<const NamedTensor> weights, ModelFormat format);
// Returns `file` after writing the weights to exactly that path (any name; parent folders
// are created), atomically as above. For `trainer export --output FILE`.
std::filesystem::path save_model_file(const std::filesystem::path& file,
                                      std::span<const NamedTensor> weights, ModelFormat format);
// Returns the written file, for weights given by name.
std::filesystem::path save_model(const std::filesystem::path& dir,
                                 const std::map<std::string, Tensor>& weights,
                                 ModelFormat format);

}  // namespace mpitrain::checkpoint
