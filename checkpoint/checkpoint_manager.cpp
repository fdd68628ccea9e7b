#include "mpitrain/checkpoint/checkpoint_manager.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <stdexcept>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/durable_io.hpp"
#include "mpitrain/checkpoint/rank_agreement.hpp"
#include "mpitrain/checkpoint/state_file.hpp"

namespace mpitrain::checkpoint {
namespace fs = std::filesystem;

namespace {

bool is_regular_file_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory_no_follow(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Returns a random 64-bit id for the temporary folder: two commits never share one, even
// across jobs writing to the same file system.
std::uint64_t random_id() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ static_cast<std::uint64_t>(device());
}

std::int64_t highest_number(const fs::path& checkpoints_dir) {
  const std::vector<CheckpointInfo> all = list_checkpoints(checkpoints_dir);
  return all.empty() ? -1 : all.back().number;
}

// Returns N when `dir` is checkpoint_<N> directly inside `checkpoints_dir`.
std::optional<std::int64_t> number_in(const fs::path& dir, const fs::path& checkpoints_dir) {
  std::error_code ec;
  const fs::path parent = fs::weakly_canonical(dir.parent_path(), ec);
  if (ec) return std::nullopt;
  const fs::path ours = fs::weakly_canonical(checkpoints_dir, ec);
  if (ec || parent != ours) return std::nullopt;
  return parse_checkpoint_folder_name(dir.filename().string());
}

// Removes a failed commit's temporary folder (rank 0) and makes the removal durable.
// Returns a note for the error message when cleaning up failed too.
std::string discard_temp(const fs::path& tmp) {
  std::string note = remove_all_noexcept(tmp);
  if (note.empty()) {
    const std::optional<std::string> sync_error =
        capture_error([&] { fsync_directory(tmp.parent_path()); });
    if (sync_error) note = *sync_error;
  }
  return note;
}

}  // namespace

// ---- free functions ---------------------------------------------------------------------------

std::vector<CheckpointInfo> list_checkpoints(const fs::path& checkpoints_dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return out;
  fs::directory_iterator it(checkpoints_dir, ec);
  if (ec) {
    throw CheckpointError("listing '" + checkpoints_dir.string() + "' failed: " + ec.message());
  }
  for (const fs::directory_entry& entry : it) {
    const std::optional<std::int64_t> n = parse_checkpoint_folder_name(entry.path().filename().string());
    if (!n || !is_directory_no_follow(entry.path())) continue;
    if (!is_regular_file_no_follow(entry.path() / kManifestFile)) continue;
    out.push_back({*n, entry.path()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.number < b.number; });
  return out;
}

std::vector<fs::path> remove_abandoned_checkpoints(const fs::path& checkpoints_dir) {
  std::vector<fs::path> doomed;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return doomed;
  fs::directory_iterator it(checkpoints_dir, ec);
  if (ec) {
    throw CheckpointError("listing '" + checkpoints_dir.string() + "' failed: " + ec.message());
  }
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!is_directory_no_follow(entry.path())) continue;
    // Any save's temporary folder: checkpoint_<N>.tmp-<id>, and <F>.tmp-<id> of a save to
    // an explicit folder F here (the trainer's checkpoints/step_<S> without automatic naming).
    const bool temp = is_commit_temp_folder_name(name);
    const bool uncommitted = parse_checkpoint_folder_name(name).has_value() &&
                             !is_regular_file_no_follow(entry.path() / kManifestFile);
    if (temp || uncommitted) doomed.push_back(entry.path());
  }
  std::sort(doomed.begin(), doomed.end());
  for (const fs::path& p : doomed) {
    const std::string error = remove_all_noexcept(p);
    if (!error.empty()) throw CheckpointError("cleaning up abandoned checkpoint: " + error);
  }
  if (!doomed.empty()) fsync_directory(checkpoints_dir);
  return doomed;
}

// ---- LoadedCheckpoint -------------------------------------------------------------------------

namespace {
H5Group open_custom(const H5File& file, std::string_view name,
                    const std::vector<std::string>& known, const fs::path& dir) {
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    std::string names;
    for (const std::string& n : known) names += (names.empty() ? "" : ", ") + n;
    throw CheckpointError("checkpoint '" + dir.string() + "' has no registered object '" +
                          std::string(name) + "' (it has: " + (names.empty() ? "none" : names) +
                          ")");
  }
  return file.root().open_group("custom/" + std::string(name));
}
}  // namespace

void LoadedCheckpoint::restore(std::string_view name, Checkpointable& object) const {
  if (!state_file_) throw CheckpointError("LoadedCheckpoint::restore: no checkpoint loaded");
  const H5Group group = open_custom(*state_file_, name, custom_names, dir);
  object.load(group);
}

std::map<std::string, StateGroup> LoadedCheckpoint::rank_file(int rank) const {
  if (rank < 0 || rank >= manifest.world_size) {
    throw CheckpointError("checkpoint '" + dir.string() + "' has no rank file of rank " +
                          std::to_string(rank) + " (world size " +
                          std::to_string(manifest.world_size) + ")");
  }
  const H5File file = H5File::open_read_only(dir / rank_file_name(rank));
  return read_rank_file(file, rank);
}

StateGroup LoadedCheckpoint::custom_state(std::string_view name) const {
  if (!state_file_) throw CheckpointError("LoadedCheckpoint::custom_state: no checkpoint loaded");
  return read_state_group(open_custom(*state_file_, name, custom_names, dir));
}

// ---- CheckpointManager ------------------------------------------------------------------------

CheckpointManager::CheckpointManager(ProjectConfiguration config, const Communicator& comm)
    : config_(std::move(config)) {
  if (config_.total_limit && *config_.total_limit == 0) {
    throw std::invalid_argument("ProjectConfiguration: total_limit must be at least 1 (or unset)");
  }
  if (config_.iteration && *config_.iteration < 0) {
    throw std::invalid_argument("ProjectConfiguration: iteration must not be negative");
  }
  config_.project_dir = fs::absolute(config_.project_dir).lexically_normal();

  std::int64_t highest = -1;
  std::optional<std::string> error;
  if (comm.rank() == 0) {
    error = capture_error([&] {
      removed_at_start_ = remove_abandoned_checkpoints(checkpoints_dir());
      highest = highest_number(checkpoints_dir());
    });
  }
  agree_on_success(comm, error, "checkpoint folder clean-up in '" + checkpoints_dir().string() + "'");
  comm.broadcast(std::span<std::int64_t>(&highest, 1), 0);
  next_ = config_.iteration.value_or(highest + 1);
}

void CheckpointManager::set_next_iteration(std::int64_t number) {
  if (number < 0) throw std::invalid_argument("CheckpointManager::set_next_iteration: negative number");
  next_ = number;
}

fs::path CheckpointManager::checkpoints_dir() const {
  return config_.project_dir / kCheckpointsFolder;
}

std::vector<CheckpointInfo> CheckpointManager::list() const {
  return list_checkpoints(checkpoints_dir());
}

std::optional<fs::path> CheckpointManager::latest() const {
  const std::vector<CheckpointInfo> all = list();
  if (all.empty()) return std::nullopt;
  return all.back().dir;
}

std::vector<CheckpointInfo> CheckpointManager::in_the_way() const {
  std::vector<CheckpointInfo> out = list();
  std::erase_if(out, [&](const CheckpointInfo& c) { return c.number < next_; });
  return out;
}

Manifest CheckpointManager::verify(const fs::path& dir) const {
  return verify_checkpoint(fs::absolute(dir).lexically_normal());
}

SaveResult CheckpointManager::save(const CheckpointState& state, const Communicator& comm) {
  if (!config_.automatic_checkpoint_naming) {
    throw std::logic_error(
        "CheckpointManager::save: automatic_checkpoint_naming is off; pass a folder");
  }
  std::array<std::int64_t, 2> header{next_, 0};
  if (comm.rank() == 0) header[1] = static_cast<std::int64_t>(random_id());
  comm.broadcast(std::span<std::int64_t>(header), 0);
  const fs::path target = checkpoints_dir() / checkpoint_folder_name(header[0]);
  SaveResult result =
      commit(state, comm, target, header[0], static_cast<std::uint64_t>(header[1]));
  next_ = header[0] + 1;

  // total_limit: only after the commit, by rank 0; failures are warnings, shared by all.
  if (comm.rank() == 0 && config_.total_limit) {
    result.removed = apply_total_limit(header[0], result.warnings);
  }
  share_report(comm, result);
  return result;
}

SaveResult CheckpointManager::save(const CheckpointState& state, const Communicator& comm,
                                   const fs::path& dir) {
  std::int64_t id = 0;
  if (comm.rank() == 0) id = static_cast<std::int64_t>(random_id());
  comm.broadcast(std::span<std::int64_t>(&id, 1), 0);
  SaveResult result = commit(state, comm, fs::absolute(dir).lexically_normal(), -1,
                             static_cast<std::uint64_t>(id));
  share_report(comm, result);
  return result;
}

SaveResult CheckpointManager::commit(const CheckpointState& state, const Communicator& comm,
                                     const fs::path& target, std::int64_t number,
                                     std::uint64_t id) {
  const int rank = comm.rank();
  const int world = comm.size();
  const fs::path tmp = target.parent_path() / temp_folder_name(target.filename().string(), id);
  const std::string what = "saving checkpoint '" + target.string() + "'";

  // Runs `step` on every rank (rank 0's steps return at once elsewhere), agrees on the
  // outcome, and on failure lets rank 0 remove the temporary folder before every rank throws.
  const auto phase = [&](std::string_view name, const auto& step) {
    const std::optional<std::string> error = capture_error(step);
    try {
      agree_on_success(comm, error, what + " (" + std::string(name) + ")");
    } catch (const CheckpointError& e) {
      std::string note;
      if (rank == 0 && fs::exists(tmp)) note = discard_temp(tmp);
      // Every rank returns only after the clean-up: nothing half-written stays behind.
      comm.barrier();
      if (!note.empty()) throw CheckpointError(std::string(e.what()) + "; clean-up: " + note);
      throw;
    }
  };

  phase("creating the folder", [&] {
    if (rank != 0) return;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(target, ec))) {
      throw CheckpointError("'" + target.string() +
                            "' already exists; checkpoints are never overwritten (save to "
                            "another folder or remove it; with automatic naming, "
                            "ProjectConfiguration::iteration sets the next number)");
    }
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      throw CheckpointError("creating '" + target.parent_path().string() + "' failed: " +
                            ec.message());
    }
    if (!fs::create_directory(tmp, ec) || ec) {
      throw CheckpointError("creating '" + tmp.string() + "' failed: " +
                            (ec ? ec.message() : std::string("it exists")));
    }
  });

  // Rank 0's own files are hashed from the bytes as it writes them (the digest reading them
  // back would give); the other ranks' files it reads and hashes in the commit step.
  std::map<std::string, FileDigest> written;
  phase("writing the files", [&] {
    if (rank == 0) {
      written[std::string(kStateFile)] =
          write_state_file(tmp / kStateFile, state, world, config_.dataset, image_buffer_.get());
    }
    written[rank_file_name(rank)] = write_rank_file(tmp / rank_file_name(rank), state.per_rank,
                                                    rank, world, config_.dataset,
                                                    image_buffer_.get());
  });

  phase("committing", [&] {
    if (rank != 0) return;
    Manifest manifest;
    manifest.format_version = kFormatVersion;
    manifest.step = state.step;
    manifest.epoch = state.epoch;
    manifest.world_size = world;
    manifest.zero_stage = state.zero_stage;
    manifest.created = utc_timestamp_now();
    manifest.files = written;
    for (int r = 1; r < world; ++r) {
      manifest.files[rank_file_name(r)] = hash_file(tmp / rank_file_name(r));
    }
    write_manifest(tmp, manifest);
    fsync_directory(tmp);
    rename_path(tmp, target);
  });

  SaveResult result;
  result.dir = target;
  result.number = number;
  // Committed: the folder has its final name. A failed fsync of the parent only means the
  // rename might not survive a power failure; reporting the save as failed would make the
  // caller retry into an existing folder, so it is a warning.
  if (rank == 0) {
    const std::optional<std::string> error =
        capture_error([&] { fsync_directory(target.parent_path()); });
    if (error) result.warnings.push_back("after the commit: " + *error);
  }
  comm.barrier();  // the contract's barrier after the commit, before any deletion
  return result;
}

void CheckpointManager::share_report(const Communicator& comm, SaveResult& result) {
  nlohmann::json report = nlohmann::json::object();
  if (comm.rank() == 0) {
    std::vector<std::string> removed;
    for (const fs::path& p : result.removed) removed.push_back(p.string());
    report["removed"] = removed;
    report["warnings"] = result.warnings;
  }
  const nlohmann::json shared = nlohmann::json::parse(broadcast_string(comm, report.dump(), 0));
  result.removed.clear();
  result.warnings.clear();
  for (const auto& p : shared.at("removed")) result.removed.emplace_back(p.get<std::string>());
  for (const auto& w : shared.at("warnings")) result.warnings.push_back(w.get<std::string>());
}

std::vector<fs::path> CheckpointManager::apply_total_limit(std::int64_t keep_number,
                                                           std::vector<std::string>& warnings) const {
  std::vector<fs::path> removed;
  const std::vector<CheckpointInfo> all = list();
  if (!config_.total_limit || all.size() <= *config_.total_limit) return removed;
  std::size_t excess = all.size() - *config_.total_limit;
  for (const CheckpointInfo& info : all) {
    if (excess == 0) break;
    if (info.number == keep_number) continue;  // never the one just saved
    // Uncommit first (manifest, then a durable folder entry), so a crash mid-deletion leaves
    // a folder the next start cleans up, never a committed checkpoint with missing files.
    const std::optional<std::string> error = capture_error([&] {
      std::error_code ec;
      fs::remove(info.dir / kManifestFile, ec);
      if (ec) throw CheckpointError("removing '" + (info.dir / kManifestFile).string() +
                                    "' failed: " + ec.message());
      fsync_directory(info.dir);
      const std::string note = remove_all_noexcept(info.dir);
      if (!note.empty()) throw CheckpointError(note);
    });
    if (error) {
      warnings.push_back("total_limit: " + *error);
    } else {
      removed.push_back(info.dir);
    }
    --excess;
  }
  if (!removed.empty()) {
    const std::optional<std::string> error = capture_error([&] { fsync_directory(checkpoints_dir()); });
    if (error) warnings.push_back("total_limit: " + *error);
  }
  return removed;
}

LoadedCheckpoint CheckpointManager::load(const fs::path& dir_in, const Communicator& comm) {
  const fs::path dir = fs::absolute(dir_in).lexically_normal();
  const int rank = comm.rank();
  const std::string what = "loading checkpoint '" + dir.string() + "'";

  // 1. Rank 0 checks every byte against the manifest before HDF5 sees any file.
  std::optional<std::string> error;
  if (rank == 0) {
    error = capture_error([&] {
      if (is_temp_folder_name(dir.filename().string())) {
        throw CheckpointError("'" + dir.string() + "' is a temporary folder of an unfinished save");
      }
      verify_checkpoint(dir);
    });
  }
  agree_on_success(comm, error, what + " (verifying)");

  // 2. Every rank reads into new objects.
  LoadedCheckpoint loaded;
  error = capture_error([&] {
    loaded.dir = dir;
    loaded.manifest = read_manifest(dir);
    const fs::path state_path = dir / kStateFile;
    auto file = std::make_shared<const H5File>(H5File::open_read_only(state_path));
    StateFileContents contents = read_state_file(*file);
    if (contents.world_size != loaded.manifest.world_size) {
      throw CheckpointError("'" + state_path.string() + "' records world_size " +
                            std::to_string(contents.world_size) + ", the manifest " +
                            std::to_string(loaded.manifest.world_size));
    }
    loaded.state.replicated = std::move(contents.replicated);
    loaded.state.config_yaml = std::move(contents.config_yaml);
    loaded.state.step = loaded.manifest.step;
    loaded.state.epoch = loaded.manifest.epoch;
    loaded.custom_names = std::move(contents.custom_names);
    loaded.state_file_ = std::move(file);
    if (rank < loaded.manifest.world_size) {
      const H5File rank_file = H5File::open_read_only(dir / rank_file_name(rank));
      loaded.state.per_rank = read_rank_file(rank_file, rank);
    } else {
      loaded.per_rank_missing = true;
    }
  });
  agree_on_success(comm, error, what + " (reading)");

  if (const std::optional<std::int64_t> k = number_in(dir, checkpoints_dir())) next_ = *k + 1;
  return loaded;
}

LoadedCheckpoint CheckpointManager::load_latest(const Communicator& comm) {
  std::string chosen;
  std::optional<std::string> error;
  if (comm.rank() == 0) {
    const std::optional<fs::path> l = latest();
    if (l) {
      chosen = l->string();
    } else {
      error = "no committed checkpoint in '" + checkpoints_dir().string() + "'";
    }
  }
  agree_on_success(comm, error, "loading the latest checkpoint");
  // Rank 0 decides, so all ranks load the same folder even if listings race.
  return load(broadcast_string(comm, chosen, 0), comm);
}

}  // namespace mpitrain::checkpoint
