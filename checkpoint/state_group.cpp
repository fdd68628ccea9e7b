#include "mpitrain/checkpoint/state_group.hpp"

#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"

namespace mpitrain::checkpoint {
namespace {

// Splits "a/b/c" into ("a/b", "c"); a key without '/' has an empty owner.
std::pair<std::string_view, std::string_view> split_owner(std::string_view key) {
  const std::size_t slash = key.rfind('/');
  if (slash == std::string_view::npos) return {{}, key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

std::string join_key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

void read_attributes(const H5Object& object, const std::string& prefix, StateGroup& out) {
  for (const std::string& name : object.attribute_names()) {
    const std::string key = join_key(prefix, name);
    switch (object.attribute_kind(name)) {
      case H5AttributeKind::integer: out.integers[key] = object.read_int64_attribute(name); break;
      case H5AttributeKind::floating: out.scalars[key] = object.read_double_attribute(name); break;
      case H5AttributeKind::string: out.strings[key] = object.read_string_attribute(name); break;
      case H5AttributeKind::other:
        throw H5Error("checkpoint file '" + object.file_name() + "', object '" + object.path() +
                      "': attribute '" + name + "' has a type the checkpoint format does not use");
    }
  }
}

void read_recursive(const H5Group& group, const std::string& prefix, StateGroup& out) {
  read_attributes(group, prefix, out);
  for (const std::string& name : group.child_names()) {
    const std::string key = join_key(prefix, name);
    switch (group.child_kind(name)) {
      case H5ChildKind::group: read_recursive(group.open_group(name), key, out); break;
      case H5ChildKind::dataset:
        if (group.is_tensor(name)) {
          out.tensors.emplace(key, group.read_tensor(name));
        } else if (group.is_string(name)) {
          out.strings.emplace(key, group.read_string(name));
        } else {
          throw H5Error("checkpoint file '" + group.file_name() + "', object '" + group.path() +
                        "/" + name + "': dataset type is neither float32 nor string");
        }
        break;
      case H5ChildKind::other:
        throw H5Error("checkpoint file '" + group.file_name() + "', object '" + group.path() +
                      "/" + name + "' is neither a group nor a dataset");
    }
  }
}

template <class Map>
void compare_keys(const Map& loaded, const Map& expected, std::string_view kind,
                  std::vector<std::string>& problems) {
  for (const auto& [key, value] : expected) {
    if (!loaded.contains(key)) problems.push_back("missing " + std::string(kind) + " '" + key + "'");
  }
  for (const auto& [key, value] : loaded) {
    if (!expected.contains(key)) {
      problems.push_back("unexpected " + std::string(kind) + " '" + key + "'");
    }
  }
}

void compare_tensors(const std::map<std::string, Tensor>& loaded,
                     const std::map<std::string, Tensor>& expected,
                     std::vector<std::string>& problems) {
  compare_keys(loaded, expected, "tensor", problems);
  for (const auto& [key, tensor] : expected) {
    const auto it = loaded.find(key);
    if (it != loaded.end() && it->second.shape() != tensor.shape()) {
      problems.push_back("tensor '" + key + "' has shape " + mpitrain::to_string(it->second.shape()) +
                         " in the checkpoint but " + mpitrain::to_string(tensor.shape()) + " here");
    }
  }
}

void throw_if_problems(const std::vector<std::string>& problems, std::string_view what) {
  if (problems.empty()) return;
  std::string msg(what);
  msg += " does not match the expected structure: ";
  constexpr std::size_t kMaxListed = 20;
  for (std::size_t i = 0; i < problems.size() && i < kMaxListed; ++i) {
    if (i > 0) msg += "; ";
    msg += problems[i];
  }
  if (problems.size() > kMaxListed) {
    msg += "; and " + std::to_string(problems.size() - kMaxListed) + " more";
  }
  throw CheckpointError(msg);
}

}  // namespace

StateGroup StateGroup::from_state_dict(StateDict dict) {
  StateGroup g;
  g.tensors = std::move(dict.tensors);
  g.scalars = std::move(dict.scalars);
  return g;
}

StateDict StateGroup::to_state_dict() && {
  if (!strings.empty()) {
    throw CheckpointError("state group holds string '" + strings.begin()->first +
                          "', which a StateDict cannot represent");
  }
  StateDict dict;
  dict.tensors = std::move(tensors);
  dict.scalars = std::move(scalars);
  for (const auto& [key, value] : integers) {
    if (!dict.scalars.emplace(key, static_cast<double>(value)).second) {
      throw CheckpointError("state group holds both an integer and a scalar named '" + key + "'");
    }
  }
  return dict;
}

void write_state_group(H5Group& group, const StateGroup& state, const DatasetOptions& options) {
  for (const auto& [key, tensor] : state.tensors) group.write_tensor(key, tensor, options);
  for (const auto& [key, text] : state.strings) group.write_string(key, text);
  for (const auto& [key, value] : state.scalars) {
    const auto [owner, name] = split_owner(key);
    if (owner.empty()) {
      group.write_double_attribute(name, value);
    } else {
      group.require_group(owner).write_double_attribute(name, value);
    }
  }
  for (const auto& [key, value] : state.integers) {
    const auto [owner, name] = split_owner(key);
    if (owner.empty()) {
      group.write_int64_attribute(name, value);
    } else {
      group.require_group(owner).write_int64_attribute(name, value);
    }
  }
}

StateGroup read_state_group(const H5Group& group) {
  StateGroup out;
  read_recursive(group, "", out);
  return out;
}

void check_same_structure(const StateGroup& loaded, const StateGroup& expected,
                          std::string_view what) {
  std::vector<std::string> problems;
  compare_tensors(loaded.tensors, expected.tensors, problems);
  compare_keys(loaded.scalars, expected.scalars, "scalar", problems);
  compare_keys(loaded.integers, expected.integers, "integer", problems);
  compare_keys(loaded.strings, expected.strings, "string", problems);
  throw_if_problems(problems, what);
}

void check_same_structure(const StateDict& loaded, const StateDict& expected,
                          std::string_view what) {
  std::vector<std::string> problems;
  compare_tensors(loaded.tensors, expected.tensors, problems);
  compare_keys(loaded.scalars, expected.scalars, "scalar", problems);
  throw_if_problems(problems, what);
}

}  // namespace mpitrain::checkpoint
