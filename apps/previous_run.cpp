#include "previous_run.hpp"

#include <fmt/format.h>

#include "checkpoint_folders.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMetricsFile = "metrics.jsonl";

// Returns "a, b, c" of the first few names, and how many more there are.
std::string shown(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 4;
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > kShown) text += fmt::format(" and {} more", names.size() - kShown);
  return text;
}

}  // namespace

std::vector<std::string> previous_run_files(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  const fs::path metrics = dir / kMetricsFile;
  if (fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0 && !ec) found.emplace_back(kMetricsFile);
  const fs::path checkpoints = dir / checkpoint::kCheckpointsFolder;
  for (const CheckpointFolder& f : committed_checkpoint_folders(checkpoints)) {
    found.push_back((fs::path(checkpoint::kCheckpointsFolder) / f.dir.filename()).string());
  }
  return found;
}

std::string previous_run_message(const TrainConfig& config, const std::vector<std::string>& found) {
  return fmt::format(
      "{}: project.dir: {} holds another run ({}); a fresh run would mix with it. To continue that run, "
      "set project.resume: latest; to start a new one, choose another project.dir, or set "
      "project.overwrite: true to remove that run's metrics.jsonl, checkpoints and model files first",
      config.origin("project.dir"), config.project.dir, shown(found));
}

std::vector<std::string> remove_previous_run(const fs::path& dir) {
  std::vector<std::string> removed;
  for (const std::string& name :
       {std::string(kMetricsFile), std::string(checkpoint::kCheckpointsFolder), std::string("model.h5"),
        std::string("model.safetensors")}) {
    if (fs::remove_all(dir / name) > 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace mpitrain::app
