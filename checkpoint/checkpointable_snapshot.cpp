#include "mpitrain/checkpoint/checkpointable_snapshot.hpp"

#include <exception>
#include <utility>

#include "mpitrain/checkpoint/checkpoint_error.hpp"

namespace mpitrain::checkpoint {
namespace {

// The group the object saves into: an object's save() gets an empty group, as when saving
// under /custom/<name>.
constexpr std::string_view kGroup = "state";

H5File save_into_memory(const std::string& name, const Checkpointable& object) {
  H5File file = H5File::create_in_memory("snapshot of registered object '" + name + "'");
  H5Group group = file.root().create_group(kGroup);
  try {
    object.save(group);
  } catch (const std::exception& e) {
    throw CheckpointError("taking a snapshot of registered object '" + name +
                          "' (its save()) failed: " + e.what());
  }
  return file;
}

}  // namespace

CheckpointableSnapshot::CheckpointableSnapshot(std::string name, const Checkpointable& object)
    : name_(std::move(name)), file_(save_into_memory(name_, object)) {}

void CheckpointableSnapshot::restore(Checkpointable& object) const {
  try {
    const H5Group group = file_.root().open_group(kGroup);
    object.load(group);
  } catch (const std::exception& e) {
    throw CheckpointError("restoring registered object '" + name_ +
                          "' from its snapshot (its load()) failed: " + e.what());
  }
}

}  // namespace mpitrain::checkpoint
