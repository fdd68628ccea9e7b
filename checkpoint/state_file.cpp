#include "mpitrain/checkpoint/state_file.hpp"

#include "mpitrain/checkpoint/checkpoint_layout.hpp"

#ifndef MPITRAIN_VERSION_STRING
#error "the build defines MPITRAIN_VERSION_STRING (CMakeLists.txt)"
#endif

namespace mpitrain::checkpoint {
namespace {

constexpr std::string_view kCustomGroup = "custom";
constexpr std::string_view kConfigDataset = "config";

bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

// Returns true when `name` may name a replicated group: the groups are the engine's (it
// checks their names on load); the root's other names are reserved.
bool is_replicated_group(std::string_view name) {
  return is_plain_name(name) && name != kCustomGroup && name != kConfigDataset;
}

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& what) {
  throw CheckpointError("checkpoint file '" + file.string() + "': " + what);
}

void write_root_attributes(H5Group& root, int world_size) {
  root.write_int64_attribute("format_version", kFormatVersion);
  root.write_string_attribute("mpitrain_version", mpitrain_version());
  root.write_int64_attribute("world_size", world_size);
}

// Returns the world size after checking format_version.
std::int64_t read_root_attributes(const H5Group& root) {
  const std::int64_t version = root.read_int64_attribute("format_version");
  if (version < 1 || version > kFormatVersion) {
    throw H5Error("checkpoint file '" + root.file_name() + "': format_version " +
                  std::to_string(version) + " is not supported (this mpitrain reads 1 to " +
                  std::to_string(kFormatVersion) + ")");
  }
  const std::int64_t world_size = root.read_int64_attribute("world_size");
  if (world_size < 1) {
    throw H5Error("checkpoint file '" + root.file_name() + "': world_size " +
                  std::to_string(world_size) + " is not positive");
  }
  return world_size;
}

// Returns the bytes of tensor and string data in the groups: the size of the file image
// to allocate up front.
std::size_t data_bytes(const std::map<std::string, StateGroup>& groups) {
  std::size_t bytes = 0;
  for (const auto& [name, group] : groups) {
    for (const auto& [key, tensor] : group.tensors) bytes += tensor.numel() * sizeof(float);
    for (const auto& [key, text] : group.strings) bytes += text.size();
  }
  return bytes;
}

}  // namespace

std::string mpitrain_version() { return MPITRAIN_VERSION_STRING; }

FileDigest write_state_file(const std::filesystem::path& path, const CheckpointState& state,
                            int world_size, const DatasetOptions& options,
                            H5ImageBuffer* buffer) {
  for (const auto& [name, group] : state.replicated) {
    if (!is_replicated_group(name)) {
      bad(path, "replicated group '" + name + "' is not a plain name other than '" +
                    std::string(kCustomGroup) + "' and '" + std::string(kConfigDataset) +
                    "' (registered objects go to CheckpointState::custom)");
    }
  }
  for (const auto& [name, object] : state.custom) {
    if (!is_plain_name(name)) bad(path, "custom object name '" + name + "' is not a plain name");
    if (object == nullptr) bad(path, "custom object '" + name + "' is null");
  }
  H5File file =
      H5File::create(path, data_bytes(state.replicated) + state.config_yaml.size(), buffer);
  H5Group root = file.root();
  write_root_attributes(root, world_size);
  for (const auto& [name, group] : state.replicated) {
    H5Group g = root.create_group(name);
    write_state_group(g, group, options);
  }
  if (!state.custom.empty()) {
    H5Group custom = root.create_group(kCustomGroup);
    for (const auto& [name, object] : state.custom) {
      H5Group g = custom.create_group(name);
      object->save(g);
    }
  }
  root.write_string(kConfigDataset, state.config_yaml);
  return file.close();
}

FileDigest write_rank_file(const std::filesystem::path& path,
                           const std::map<std::string, StateGroup>& per_rank, int rank,
                           int world_size, const DatasetOptions& options,
                           H5ImageBuffer* buffer) {
  for (const auto& [name, group] : per_rank) {
    if (!is_plain_name(name)) bad(path, "per-rank group name '" + name + "' is not a plain name");
  }
  H5File file = H5File::create(path, data_bytes(per_rank), buffer);
  H5Group root = file.root();
  write_root_attributes(root, world_size);
  root.write_int64_attribute("rank", rank);
  for (const auto& [name, group] : per_rank) {
    H5Group g = root.create_group(name);
    write_state_group(g, group, options);
  }
  return file.close();
}

StateFileContents read_state_file(const H5File& file) {
  const H5Group root = file.root();
  StateFileContents out;
  out.world_size = read_root_attributes(root);
  out.mpitrain_version = root.read_string_attribute("mpitrain_version");
  for (const std::string& name : root.child_names()) {
    if (name == kConfigDataset) {
      out.config_yaml = root.read_string(name);
    } else if (name == kCustomGroup) {
      out.custom_names = root.open_group(name).child_names();
    } else if (is_replicated_group(name)) {
      out.replicated.emplace(name, read_state_group(root.open_group(name)));
    } else {
      bad(file.path(), "unknown root object '/" + name + "'");
    }
  }
  if (!root.contains(kConfigDataset)) bad(file.path(), "has no /config dataset");
  return out;
}

std::map<std::string, StateGroup> read_rank_file(const H5File& file, int rank) {
  const H5Group root = file.root();
  read_root_attributes(root);
  const std::int64_t stored = root.read_int64_attribute("rank");
  if (stored != rank) {
    bad(file.path(), "holds the state of rank " + std::to_string(stored) + ", expected rank " +
                         std::to_string(rank));
  }
  std::map<std::string, StateGroup> out;
  for (const std::string& name : root.child_names()) {
    out.emplace(name, read_state_group(root.open_group(name)));
  }
  return out;
}

}  // namespace mpitrain::checkpoint
