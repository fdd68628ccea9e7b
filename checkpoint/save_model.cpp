#include "mpitrain/checkpoint/save_model.hpp"

#include <cerrno>
#include <cstring>
#include <random>
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

using Named = std::vector<std::pair<std::string, const Tensor*>>;

fs::path write_model(const fs::path& dir_in, const Named& weights, ModelFormat format) {
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

fs::path save_model(const fs::path& dir, std::span<nn::Parameter* const> params,
                    ModelFormat format) {
  Named weights;
  std::map<std::string, bool> seen;
  for (const nn::Parameter* p : params) {
    if (p == nullptr) throw std::invalid_argument("save_model: null parameter");
    if (!seen.emplace(p->name, true).second) {
      throw std::invalid_argument("save_model: duplicate parameter name '" + p->name + "'");
    }
    weights.emplace_back(p->name, &p->value);
  }
  return write_model(dir, weights, format);
}

fs::path save_model(const fs::path& dir, const std::map<std::string, Tensor>& weights,
                    ModelFormat format) {
  Named named;
  for (const auto& [name, tensor] : weights) named.emplace_back(name, &tensor);
  return write_model(dir, named, format);
}

}  // namespace mpitrain::checkpoint
