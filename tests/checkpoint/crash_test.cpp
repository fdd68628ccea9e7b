// Crash safety of the commit protocol, single process: a job killed with SIGKILL in the
// middle of a save (a separate executable, so MPI and fork never mix) leaves the previous
// checkpoint committed and loadable, and its temporary folder is removed when the next job
// starts; with automatic naming (checkpoint_<N>.tmp-<id>) and with explicit folders
// (step_<N>.tmp-<id>, as the trainer saves without automatic naming). The helper job is
// owned by the test (killed and reaped whatever happens), frozen with SIGSTOP before the
// test decides that it is mid-save, and every wait is bounded.
// A real "No space left on device" is disk_full_test.cpp's.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

#ifndef MPITRAIN_SAVE_FOREVER
#error "CMake passes the path of the checkpoint_save_forever helper"
#endif

namespace mpitrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Returns the name of an entry of `dir` containing ".tmp-", or an empty string.
std::string find_temp(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) return name;
  }
  return {};
}

// Waits until inotify reports an event on a watched folder or `timeout_ms` pass, and
// drains the events. Callers look at the file system again after each call, so a missed or
// spurious event costs at most one timeout, never a hang.
void wait_for_event(int inotify_fd, int timeout_ms) {
  pollfd p{inotify_fd, POLLIN, 0};
  const int n = ::poll(&p, 1, timeout_ms);
  if (n < 0 && errno != EINTR) throw std::runtime_error("poll on inotify failed");
  if (n <= 0) return;
  alignas(inotify_event) char buffer[4096];
  const ssize_t got = ::read(inotify_fd, buffer, sizeof buffer);
  if (got < 0 && errno != EINTR && errno != EAGAIN) throw std::runtime_error("inotify read failed");
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Returns true when the child has stopped (SIGSTOP delivered and acted on), false when it
// has exited instead.
bool stop(int pid) {
  if (::kill(pid, SIGSTOP) != 0) throw std::runtime_error("kill(SIGSTOP) failed");
  int status = 0;
  while (::waitpid(pid, &status, WUNTRACED) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid(WUNTRACED) failed");
  }
  return WIFSTOPPED(status);
}

// A save caught in the middle: the number of the checkpoint being saved and its temporary
// folder.
struct CaughtSave {
  int number = -1;
  fs::path temp_dir;
};

// Returns the save of `child` that was stopped with state.h5 in its temporary folder and
// not yet committed (the child is left stopped), or nothing after kAttempts saves were
// missed or kDeadline passed. A save is missed when it commits (its temporary folder is
// renamed) between two looks; the next save is then tried. `folder_prefix` is
// "checkpoint_" or "step_".
std::optional<CaughtSave> catch_a_save(testing::OwnedChild& child, const fs::path& ckpts,
                                       const std::string& folder_prefix) {
  constexpr int kAttempts = 20;
  constexpr int kPollMs = 20;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const auto before_deadline = [&] { return std::chrono::steady_clock::now() < deadline; };
  Fd watch(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (watch.get() < 0) throw std::runtime_error("inotify_init1 failed");
  if (inotify_add_watch(watch.get(), ckpts.c_str(), IN_CREATE | IN_MOVED_TO) < 0) {
    throw std::runtime_error("inotify_add_watch " + ckpts.string() + " failed");
  }
  for (int attempt = 0; attempt < kAttempts && before_deadline(); ++attempt) {
    std::string temp;
    while ((temp = find_temp(ckpts)).empty() && before_deadline()) {
      wait_for_event(watch.get(), kPollMs);
    }
    if (temp.empty()) break;
    if (!is_commit_temp_folder_name(temp) || temp.rfind(folder_prefix, 0) != 0) {
      ADD_FAILURE() << "unexpected temporary folder " << temp;
      return std::nullopt;
    }
    const int number = std::stoi(temp.substr(folder_prefix.size()));
    const fs::path temp_dir = ckpts / temp;
    const fs::path committed = ckpts / (folder_prefix + std::to_string(number));
    // ENOENT: the save committed already; the loop below then sees the folder gone.
    const int wd = inotify_add_watch(watch.get(), temp_dir.c_str(), IN_CREATE);
    while (before_deadline() && fs::exists(temp_dir)) {
      if (fs::exists(temp_dir / "state.h5")) {
        // Freeze the child, then make sure that the save is still in progress.
        if (!stop(child.pid())) {
          ADD_FAILURE() << "the helper exited while saving checkpoint " << number;
          return std::nullopt;
        }
        if (fs::exists(temp_dir) && !fs::exists(committed)) return CaughtSave{number, temp_dir};
        if (::kill(child.pid(), SIGCONT) != 0) throw std::runtime_error("kill(SIGCONT) failed");
        break;
      }
      wait_for_event(watch.get(), kPollMs);
    }
    if (wd >= 0) inotify_rm_watch(watch.get(), wd);
  }
  ADD_FAILURE() << "no save of the helper could be caught in the middle in " << kAttempts
                << " attempts or 120 s";
  return std::nullopt;
}

// Starts save_forever (in `naming` mode: "automatic" or "explicit"), lets it commit two
// checkpoints, stops it while it writes a later one (the first one caught with state.h5 in
// its temporary folder), kills it with SIGKILL, then checks that the next job removes the
// temporary folder and resumes from the checkpoint before.
void kill_during_save_then_resume(const std::string& naming) {
  MpiRuntime runtime;
  const Communicator comm(runtime);
  TempDir dir("crash");
  const fs::path project = dir.path() / "run";
  const fs::path ckpts = project / "checkpoints";
  const bool automatic = naming == "automatic";
  const std::string prefix = automatic ? "checkpoint_" : "step_";
  const auto folder = [&](int k) { return prefix + std::to_string(k); };

  // 32 MiB per checkpoint: a save takes tens of milliseconds, a wide target for the kill.
  std::vector<std::string> argv{MPITRAIN_SAVE_FOREVER, project.string(), "32"};
  if (!automatic) argv.push_back("explicit");
  testing::OwnedChild child(testing::spawn_process(argv));
  for (int k = 0; k < 2; ++k) {
    const std::optional<std::string> line = testing::read_line(child.output_fd());
    ASSERT_TRUE(line.has_value()) << "the helper exited early";
    ASSERT_EQ(*line, "committed " + std::to_string(k));
  }

  const std::optional<CaughtSave> caught = catch_a_save(child, ckpts, prefix);
  ASSERT_TRUE(caught.has_value());
  const int k = caught->number;
  ASSERT_GE(k, 2);
  const int status = child.kill_and_wait();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

  // Killed mid-save: the temporary folder is still there, checkpoint k was never committed.
  ASSERT_TRUE(fs::exists(caught->temp_dir));
  ASSERT_FALSE(fs::exists(ckpts / folder(k)));
  ASSERT_TRUE(fs::exists(ckpts / folder(k - 1) / "MANIFEST.json"));

  // The next job cleans up and resumes from checkpoint k - 1.
  ProjectConfiguration config;
  config.project_dir = project;
  config.automatic_checkpoint_naming = automatic;
  CheckpointManager manager(config, comm);
  EXPECT_EQ(manager.removed_at_start(), std::vector<fs::path>{caught->temp_dir});
  EXPECT_TRUE(find_temp(ckpts).empty());
  const LoadedCheckpoint loaded =
      automatic ? manager.load_latest(comm) : manager.load(ckpts / folder(k - 1), comm);
  EXPECT_EQ(loaded.dir, ckpts / folder(k - 1));
  if (automatic) {
    EXPECT_EQ(manager.next_iteration(), k);
  }
  EXPECT_EQ(loaded.state.replicated.at("engine").integers.at("step"), k - 1);
  const Tensor& w = loaded.state.replicated.at("model").tensors.at("0.weight");
  ASSERT_EQ(w.numel(), (std::size_t{32} << 20) / sizeof(float));
  for (const std::size_t i : {std::size_t{0}, std::size_t{12345}, w.numel() - 1}) {
    EXPECT_EQ(w[i], static_cast<float>(k - 1) + static_cast<float>(i % (1u << 20)) / 8.0f) << i;
  }
}

TEST(CheckpointCrash, SigkillDuringSaveKeepsThePreviousCheckpoint) {
  kill_during_save_then_resume("automatic");
}

TEST(CheckpointCrash, SigkillDuringSaveToAnExplicitFolderIsCleanedUpToo) {
  kill_during_save_then_resume("explicit");
}

}  // namespace
}  // namespace mpitrain::checkpoint
