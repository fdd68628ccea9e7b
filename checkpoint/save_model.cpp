#include "mpitrain/checkpoint/save_model.hpp"

#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/durable_io.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/safetensors.hpp"

namespace mpitrain::checkpoint {
namespace fs = std::filesystem;

namespace {

// Returns `target` after writing `weights` to it (see save_model_file).
fs::path write_model(const fs::path& target_in, std::span<const NamedTensor> weights,
                     ModelFormat format) {
  const fs::path target = fs::absolute(target_in);
  const fs::path dir = target.parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError("creating '" + dir.string() + "' failed: " + ec.message());
  std::random_device device;
  const fs::path tmp = dir / (target.filename().string() + std::string(kTempMarker) +
                              std::to_string(device()));
  try {
    if (format == ModelFormat::hdf5) {
      std::size_t bytes = 0;
      for (const auto& [name, tensor] : weights) bytes += tensor->numel() * sizeof(float);
      H5File file = H5File::create(tmp, bytes);
      H5Group root = file.root();
      for (const auto& [name, tensor] : weights) root.write_tensor(name, *tensor);
      file.close();
    } else {
      // PyTorch and Hugging Face loaders (transformers) expect {"format": "pt"}.
      write_safetensors(tmp, weights, {{"format", "pt"}});
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      throw CheckpointError("rename '" + tmp.string() + "' to '" + target.string() +
                            "' failed: " + std::strerror(err));
    }
    fsync_directory(dir);
  } catch (...) {
    remove_all_noexcept(tmp);
    throw;
  }
  return target;
}

}  // namespace

std::string_view to_string(ModelFormat format) noexcept {
  return format == ModelFormat::hdf5 ? "hdf5" : "safetensors";
}

ModelFormat parse_model_format(std::string_view name) {
  // "h5" is how the trainer's config and CLI spell it (the file's extension).
  if (name == "hdf5" || name == "h5") return ModelFormat::hdf5;
  if (name == "safetensors") return ModelFormat::safetensors;
  throw std::invalid_argument("unknown model format '" + std::string(name) +
                              "' (valid: h5, hdf5, safetensors)");
}

namespace {

// Throws std::invalid_argument for a null tensor or a name given twice.
void check_weights(std::span<const NamedTensor> weights) {
  std::set<std::string_view> seen;
  for (const NamedTensor& w : weights) {
    if (w.tensor == nullptr) {
      throw std::invalid_argument("save_model: null tensor for '" + w.name + "'");
    }
    if (!seen.insert(w.name).second) {
      throw std::invalid_argument("save_model: duplicate parameter name '" + w.name + "'");
    }
  }
}

// Returns <dir>/model.h5 or <dir>/model.safetensors.
fs::path model_file(const fs::path& dir, ModelFormat format) {
  return dir / (format == ModelFormat::hdf5 ? "model.h5" : "model.safetensors");
}

}  // namespace

fs::path save_model(const fs::path& dir, std::span<const NamedTensor> weights,
                    ModelFormat format) {
  check_weights(weights);
  return write_model(model_file(dir, format), weights, format);
}

fs::path save_model(const fs::path& dir, const std::map<std::string, Tensor>& weights,
                    ModelFormat format) {
  std::vector<NamedTensor> named;
  for (const auto& [name, tensor] : weights) named.push_back({name, &tensor});
  return write_model(model_file(dir, format), named, format);
}

fs::path save_model_file(const fs::path& file, std::span<const NamedTensor> weights,
                         ModelFormat format) {
  check_weights(weights);
  return write_model(file, weights, format);
}

}  // namespace mpitrain::checkpoint
