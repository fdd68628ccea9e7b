#include "mpitrain/checkpoint/load_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/manifest.hpp"
#include "mpitrain/checkpoint/safetensors.hpp"
#include "mpitrain/checkpoint/state_file.hpp"

namespace mpitrain::checkpoint {
namespace fs = std::filesystem;

namespace {

// Adds every float32 dataset under `group`, at any depth, to `out` under `prefix` + its
// relative path.
void read_h5_group(const H5Group& group, const std::string& prefix,
                   std::map<std::string, Tensor>& out) {
  for (const std::string& child : group.child_names()) {
    switch (group.child_kind(child)) {
      case H5ChildKind::group:
        read_h5_group(group.open_group(child), prefix + child + "/", out);
        break;
      case H5ChildKind::dataset:
        out.emplace(prefix + child, group.read_tensor(child));
        break;
      case H5ChildKind::other:
        throw CheckpointError(fmt::format("load_model: '{}' holds '{}{}', neither a group nor a "
                                          "dataset",
                                          group.file_name(), prefix, child));
    }
  }
}

std::map<std::string, Tensor> read_h5_model(const fs::path& file) {
  std::map<std::string, Tensor> out;
  H5File h5 = H5File::open_read_only(file);
  read_h5_group(h5.root(), "", out);
  h5.close();
  return out;
}

// Returns the /model group of a committed checkpoint folder, verified against its manifest.
std::map<std::string, Tensor> read_checkpoint_model(const fs::path& dir) {
  verify_checkpoint(dir);
  H5File h5 = H5File::open_read_only(dir / "state.h5");
  StateFileContents contents = read_state_file(h5);
  h5.close();
  const auto model = contents.replicated.find("model");
  if (model == contents.replicated.end()) {
    throw CheckpointError(fmt::format("load_model: checkpoint '{}' has no /model group",
                                      dir.string()));
  }
  return std::move(model->second.tensors);
}

}  // namespace

std::map<std::string, Tensor> read_model(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(path / "MANIFEST.json", ec)) {
      throw CheckpointError(fmt::format(
          "load_model: '{}' is a folder without MANIFEST.json, not a committed checkpoint",
          path.string()));
    }
    return read_checkpoint_model(path);
  }
  const std::string ext = path.extension().string();
  if (ext == ".safetensors") return read_safetensors(path).tensors;
  if (ext == ".h5" || ext == ".hdf5") {
    if (!fs::exists(path, ec)) {
      throw CheckpointError(fmt::format("load_model: '{}' does not exist", path.string()));
    }
    return read_h5_model(path);
  }
  throw CheckpointError(fmt::format(
      "load_model: '{}' is neither a .h5 nor a .safetensors file nor a checkpoint folder",
      path.string()));
}

void load_model(const fs::path& path, std::span<const WeightsSlot> into) {
  // By name, so that the first error reported does not depend on the model's order.
  std::map<std::string_view, Tensor*> wanted;
  for (const WeightsSlot& slot : into) {
    if (slot.tensor == nullptr) {
      throw std::invalid_argument("load_model: null tensor for '" + slot.name + "'");
    }
    if (!wanted.emplace(slot.name, slot.tensor).second) {
      throw std::invalid_argument("load_model: duplicate tensor name '" + slot.name + "'");
    }
  }
  const std::map<std::string, Tensor> stored = read_model(path);
  const std::string file = path.string();
  // Everything is checked before anything is copied: a failed load leaves the model as it was.
  for (const auto& [name, tensor] : wanted) {
    const auto it = stored.find(std::string(name));
    if (it == stored.end()) {
      throw CheckpointError(fmt::format("load_model: tensor '{}' of the model is missing from '{}'",
                                        name, file));
    }
    if (it->second.shape() != tensor->shape()) {
      throw CheckpointError(fmt::format(
          "load_model: tensor '{}' has shape {} in '{}', but {} in the model", name,
          mpitrain::to_string(it->second.shape()), file, mpitrain::to_string(tensor->shape())));
    }
  }
  for (const auto& [name, tensor] : stored) {
    if (wanted.count(name) == 0) {
      throw CheckpointError(fmt::format("load_model: '{}' holds tensor '{}' that the model does not have",
                                        file, name));
    }
  }
  for (const WeightsSlot& slot : into) {
    const Tensor& t = stored.at(slot.name);
    std::copy_n(t.data(), t.numel(), slot.tensor->data());
  }
}

}  // namespace mpitrain::checkpoint
