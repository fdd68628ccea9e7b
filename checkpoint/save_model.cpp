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

fs::path write_model(const fs::path& dir_in, std::span<const NamedTensor> weights,
                     ModelFormat format) {
  const fs::path dir = fs::absolute(dir_in);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError("creating '" + dir.string() + "' failed: " + ec.message());
  const fs::path target =
      dir / (format == ModelFormat::hdf5 ? "model.h5" : "model.safetensors");
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
      write_safetensors(tmp, weights);
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
  if (name == "hdf5") return ModelFormat::hdf5;
  if (name == "safetensors") return ModelFormat::safetensors;
  throw std::invalid_argument("unknown model format '" + std::string(name) +
                              "' (valid: hdf5, safetensors)");
}

fs::path save_model(const fs::path& dir, std::span<const NamedTensor> weights,
                    ModelFormat format) {
  std::set<std::string_view> seen;
  for (const NamedTensor& w : weights) {
    if (w.tensor == nullptr) {
      throw std::invalid_argument("save_model: null tensor for '" + w.name + "'");
    }
    if (!seen.insert(w.name).second) {
      throw std::invalid_argument("save_model: duplicate parameter name '" + w.name + "'");
    }
  }
  return write_model(dir, weights, format);
}

fs::path save_model(const fs::path& dir, const std::map<std::string, Tensor>& weights,
                    ModelFormat format) {
  std::vector<NamedTensor> named;
  for (const auto& [name, tensor] : weights) named.push_back({name, &tensor});
  return write_model(dir, named, format);
}

}  // namespace mpitrain::checkpoint
