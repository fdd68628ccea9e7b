#include "checkpoints_command.hpp"

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "checkpoint_folders.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/checkpoint/manifest.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

bool is_checkpoint_folder(const fs::path& dir) { return fs::exists(dir / checkpoint::kManifestFile); }

// Returns the folder holding checkpoint_<N> folders: DIR/checkpoints when it exists, else DIR.
fs::path checkpoints_folder(const fs::path& dir) {
  return fs::is_directory(dir / "checkpoints") ? dir / "checkpoints" : dir;
}

}  // namespace

int list_checkpoints_command(const fs::path& dir, std::FILE* out, std::FILE* err) {
  if (!fs::is_directory(dir)) {
    std::fprintf(err, "trainer checkpoints list: '%s' %s\n", dir.c_str(),
                 fs::exists(dir) ? "is not a folder" : "does not exist");
    return 2;
  }
  const fs::path folder = checkpoints_folder(dir);
  const std::vector<CheckpointFolder> all = committed_checkpoint_folders(folder);
  std::fprintf(out, "# %s: %zu committed checkpoint%s\n", folder.c_str(), all.size(), all.size() == 1 ? "" : "s");
  std::fprintf(out, "# %-18s %10s %7s %6s %-21s %14s\n", "name", "step", "epoch", "ranks", "created", "bytes");
  for (const CheckpointFolder& info : all) {
    try {
      const checkpoint::Manifest m = checkpoint::read_manifest(info.dir);
      std::uint64_t bytes = 0;
      for (const auto& [name, digest] : m.files) bytes += digest.bytes;
      std::fprintf(out, "  %-18s %10lld %7lld %6lld %-21s %14llu\n", info.dir.filename().c_str(),
                   static_cast<long long>(m.step), static_cast<long long>(m.epoch),
                   static_cast<long long>(m.world_size), m.created.c_str(),
                   static_cast<unsigned long long>(bytes));
    } catch (const std::exception& e) {
      std::fprintf(out, "  %-18s unreadable manifest: %s\n", info.dir.filename().c_str(), e.what());
    }
  }
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || is_checkpoint_folder(entry.path())) continue;
    if (!name.starts_with("checkpoint_") && !name.starts_with("step_")) continue;
    if (checkpoint::is_commit_temp_folder_name(name)) {
      std::fprintf(out, "  %-18s uncommitted (an interrupted save): never loaded, removed when a run starts\n",
                   name.c_str());
    } else if (checkpoint::is_temp_folder_name(name)) {
      // Named like a temporary folder, but not as this library names them: someone else's.
      std::fprintf(out, "  %-18s temporary: never loaded, not removed automatically\n", name.c_str());
    } else if (checkpoint::parse_checkpoint_folder_name(name)) {
      std::fprintf(out, "  %-18s uncommitted (no MANIFEST.json): never loaded, removed when a run starts\n",
                   name.c_str());
    } else if (parse_step_folder_name(name)) {
      // The trainer never leaves one (a save renames a complete folder): someone else's.
      std::fprintf(out, "  %-18s no MANIFEST.json: never loaded, not removed automatically\n", name.c_str());
    }
  }
  return 0;
}

int verify_checkpoints_command(const fs::path& dir, std::FILE* out, std::FILE* err) {
  std::vector<fs::path> targets;
  if (is_checkpoint_folder(dir)) {
    targets.push_back(dir);
  } else if (fs::is_directory(dir)) {
    for (const CheckpointFolder& f : committed_checkpoint_folders(checkpoints_folder(dir))) {
      targets.push_back(f.dir);
    }
    if (targets.empty()) {
      std::fprintf(err, "trainer checkpoints verify: no committed checkpoint in '%s'\n", dir.c_str());
      return 1;
    }
  } else {
    std::fprintf(err, "trainer checkpoints verify: '%s' %s\n", dir.c_str(),
                 fs::exists(dir) ? "is not a folder" : "does not exist");
    return 2;
  }
  int failed = 0;
  for (const fs::path& target : targets) {
    try {
      const checkpoint::Manifest m = checkpoint::verify_checkpoint(target);
      std::fprintf(out, "OK      %s (step %lld, %zu files)\n", target.c_str(), static_cast<long long>(m.step),
                   m.files.size());
    } catch (const std::exception& e) {
      ++failed;
      std::fprintf(out, "FAILED  %s: %s\n", target.c_str(), e.what());
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace mpitrain::app
