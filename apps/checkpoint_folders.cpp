#include "checkpoint_folders.hpp"

#include <algorithm>
#include <charconv>

#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/checkpoint_manager.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kStepPrefix = "step_";

bool has_manifest(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::symlink_status(dir / checkpoint::kManifestFile, ec));
}

}  // namespace

std::string step_folder_name(std::int64_t step) { return std::string(kStepPrefix) + std::to_string(step); }

std::optional<std::int64_t> parse_step_folder_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::vector<CheckpointFolder> step_folders(const fs::path& checkpoints_dir) {
  std::vector<CheckpointFolder> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return out;
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoints_dir)) {
    const std::optional<std::int64_t> step = parse_step_folder_name(entry.path().filename().string());
    if (!step || !fs::is_directory(entry.symlink_status())) continue;
    out.push_back({CheckpointFolder::Naming::step, *step, entry.path(), has_manifest(entry.path())});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointFolder& a, const CheckpointFolder& b) { return a.number < b.number; });
  return out;
}

std::vector<CheckpointFolder> committed_checkpoint_folders(const fs::path& checkpoints_dir) {
  std::vector<CheckpointFolder> out;
  for (const checkpoint::CheckpointInfo& info : checkpoint::list_checkpoints(checkpoints_dir)) {
    out.push_back({CheckpointFolder::Naming::automatic, info.number, info.dir, true});
  }
  for (CheckpointFolder& f : step_folders(checkpoints_dir)) {
    if (f.committed) out.push_back(std::move(f));
  }
  return out;
}

}  // namespace mpitrain::app
