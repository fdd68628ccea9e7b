#include "checkpoint_argument.hpp"

#include <fmt/format.h>

#include <vector>

#include "checkpoint_folders.hpp"

namespace mpitrain::app {
namespace fs = std::filesystem;

fs::path resolve_checkpoint_argument(const TrainConfig& config, const std::string& argument) {
  if (argument != "latest") {
    std::error_code ec;
    if (!fs::exists(argument, ec)) {
      throw ConfigError(fmt::format("--checkpoint {}: no such checkpoint folder or weights file", argument));
    }
    return argument;
  }
  const fs::path dir = fs::path(config.project.dir) / "checkpoints";
  const auto wanted = config.project.automatic_checkpoint_naming ? CheckpointFolder::Naming::automatic
                                                                 : CheckpointFolder::Naming::step;
  const std::vector<CheckpointFolder> folders = committed_checkpoint_folders(dir);
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    if (it->naming == wanted) return it->dir;
  }
  // Only the other naming's folders: a config that does not say how the run named them
  // still finds them (the newest by their own numbering; there is no other kind to confuse).
  if (!folders.empty()) return folders.back().dir;
  throw ConfigError(fmt::format("--checkpoint latest: no committed checkpoint in {} (project.dir: {})",
                                dir.string(), config.project.dir));
}

}  // namespace mpitrain::app
