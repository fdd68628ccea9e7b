#include "run_start.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>
#include <system_error>

#include "agreed_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

// Throws ConfigError unless `dir` is a folder this process may create files in.
void require_writable(const TrainConfig& config, const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw ConfigError(fmt::format("{}: project.dir: {} is not a folder", config.origin("project.dir"), dir.string()));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(fmt::format("{}: project.dir: cannot write to {}: {}", config.origin("project.dir"),
                                  dir.string(), std::strerror(errno)));
  }
}

// Step 1: project.dir exists and is writable, as is its checkpoints/ if present.
void check_project_dir(const TrainConfig& config) {
  const fs::path dir(config.project.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("{}: project.dir: cannot create {}: {}", config.origin("project.dir"),
                                  dir.string(), ec.message()));
  }
  require_writable(config, dir);
  const fs::path checkpoints = dir / checkpoint::kCheckpointsFolder;
  if (fs::exists(fs::symlink_status(checkpoints, ec))) require_writable(config, checkpoints);
}

// Step 2: the lock, or a ConfigError naming its holder.
RunLock lock_project_dir(const TrainConfig& config) {
  std::string holder;
  std::optional<RunLock> lock;
  try {
    lock = RunLock::try_acquire(config.project.dir, holder);
  } catch (const std::system_error& e) {
    throw ConfigError(fmt::format("{}: project.dir: cannot lock {}: {}", config.origin("project.dir"),
                                  config.project.dir, e.what()));
  }
  if (!lock) {
    throw ConfigError(fmt::format(
        "{}: project.dir: {} is in use by another run ({}; lock file {}); wait for it to end or "
        "choose another project.dir",
        config.origin("project.dir"), config.project.dir, holder,
        (fs::path(config.project.dir) / kRunLockFile).string()));
  }
  return std::move(*lock);
}

// Step 3: project.resume: PATH names a committed checkpoint folder that exists.
void check_resume_folder(const TrainConfig& config) {
  const std::string& resume = config.project.resume;
  if (resume == "none" || resume == "latest") return;
  const fs::path dir(resume);
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found || (!ec && !fs::is_directory(status))) {
    throw ConfigError(fmt::format(
        "{}: project.resume: {} {}; name a committed checkpoint folder, or resume from latest",
        config.origin("project.resume"), resume,
        status.type() == fs::file_type::not_found ? "does not exist"
                                                  : "is a file, not a checkpoint folder"));
  }
  if (ec) return;  // cannot be examined: loading it names what is wrong (exit 1)
  const std::string name = dir.lexically_normal().filename().string();
  std::string why;
  if (checkpoint::is_commit_temp_folder_name(name)) {
    why = "is the temporary folder of an interrupted save";
  } else if (!fs::is_regular_file(dir / checkpoint::kManifestFile, ec)) {
    why = fmt::format("holds no {}", checkpoint::kManifestFile);
  }
  if (why.empty()) return;
  throw ConfigError(fmt::format(
      "{}: project.resume: {} {}: it is not a committed checkpoint, so this run does not start (the "
      "folder is left as it is); name a committed checkpoint, or resume from latest",
      config.origin("project.resume"), resume, why));
}

}  // namespace

void agree_on_rank0(const Communicator& comm, const std::function<void()>& check) {
  int verdict = 0;  // 0 passed, 2 ConfigError, 1 any other exception
  std::exception_ptr failure;
  std::string message;
  if (comm.rank() == 0) {
    try {
      check();
    } catch (const ConfigError&) {
      verdict = 2;
      failure = std::current_exception();
    } catch (const std::exception& e) {
      verdict = 1;
      message = e.what();
    }
  }
  comm.broadcast(std::span<int>(&verdict, 1), 0);
  if (verdict == 0) return;
  if (failure) std::rethrow_exception(failure);
  if (verdict == 2) throw ConfigError("(reported by rank 0)");
  throw AgreedError(comm.rank() == 0 ? message : std::string("(reported by rank 0)"));
}

RunStart start_run(const TrainConfig& config, const Communicator& comm) {
  RunStart start;
  agree_on_rank0(comm, [&] {
    check_project_dir(config);
    start.lock.emplace(lock_project_dir(config));
    check_resume_folder(config);
  });
  return start;
}

}  // namespace mpitrain::app
