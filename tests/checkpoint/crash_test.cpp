// Crash safety of the commit protocol, single process: a job killed with SIGKILL in the
// middle of a save (a separate executable, so MPI and fork never mix) leaves the previous
// checkpoint committed and loadable, and its temporary folder is removed when the next job
// starts; with automatic naming (checkpoint_<N>.tmp-<id>) and with explicit folders
// (step_<N>.tmp-<id>, as the trainer saves without automatic naming).
// A real "No space left on device" is disk_full_test.cpp's.

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

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

// Blocks until inotify reports a creation in a watched folder.
void wait_for_event(int inotify_fd) {
  alignas(inotify_event) char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(inotify_fd, buffer, sizeof buffer);
    if (n > 0) return;
    if (n < 0 && errno != EINTR) throw std::runtime_error("inotify read failed");
  }
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

// Starts save_forever (in `naming` mode: "automatic" or "explicit"), lets it commit two
// checkpoints, kills it with SIGKILL while it writes the third, then checks that the next
// job removes the temporary folder and resumes from the second.
void kill_during_save_then_resume(const std::string& naming) {
  MpiRuntime runtime;
  const Communicator comm(runtime);
  TempDir dir("crash");
  const fs::path project = dir.path() / "run";
  const fs::path ckpts = project / "checkpoints";
  const bool automatic = naming == "automatic";
  const auto folder = [&](int k) {
    return (automatic ? "checkpoint_" : "step_") + std::to_string(k);
  };

  // 32 MiB per checkpoint: a save takes tens of milliseconds, a wide target for the kill.
  std::vector<std::string> argv{MPITRAIN_SAVE_FOREVER, project.string(), "32"};
  if (!automatic) argv.push_back("explicit");
  const testing::ChildProcess child = testing::spawn_process(argv);
  Fd output(child.output_fd);
  for (int k = 0; k < 2; ++k) {
    const std::optional<std::string> line = testing::read_line(output.get());
    ASSERT_TRUE(line.has_value()) << "the helper exited early";
    ASSERT_EQ(*line, "committed " + std::to_string(k));
  }

  // The helper is now saving its third checkpoint (or about to): wait until its temporary
  // folder holds state.h5, which is being written, then kill without warning.
  Fd watch(inotify_init1(IN_CLOEXEC));
  ASSERT_GE(watch.get(), 0);
  ASSERT_GE(inotify_add_watch(watch.get(), ckpts.c_str(), IN_CREATE), 0);
  std::string temp;
  while ((temp = find_temp(ckpts)).empty()) wait_for_event(watch.get());
  ASSERT_EQ(temp.rfind(folder(2) + ".tmp-", 0), 0u) << temp;
  ASSERT_TRUE(is_commit_temp_folder_name(temp)) << temp;
  const fs::path temp_dir = ckpts / temp;
  ASSERT_GE(inotify_add_watch(watch.get(), temp_dir.c_str(), IN_CREATE), 0);
  while (!fs::exists(temp_dir / "state.h5")) wait_for_event(watch.get());
  ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
  const int status = testing::wait_for(child.pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

  // Killed mid-save: the temporary folder is still there, the third was never committed.
  ASSERT_TRUE(fs::exists(temp_dir));
  ASSERT_FALSE(fs::exists(ckpts / folder(2)));
  ASSERT_TRUE(fs::exists(ckpts / folder(1) / "MANIFEST.json"));

  // The next job cleans up and resumes from the second checkpoint.
  ProjectConfiguration config;
  config.project_dir = project;
  config.automatic_checkpoint_naming = automatic;
  CheckpointManager manager(config, comm);
  EXPECT_EQ(manager.removed_at_start(), std::vector<fs::path>{temp_dir});
  EXPECT_TRUE(find_temp(ckpts).empty());
  const LoadedCheckpoint loaded = automatic ? manager.load_latest(comm) : manager.load(ckpts / folder(1), comm);
  EXPECT_EQ(loaded.dir, ckpts / folder(1));
  if (automatic) {
    EXPECT_EQ(manager.next_iteration(), 2);
  }
  EXPECT_EQ(loaded.state.replicated.at("engine").integers.at("step"), 1);
  const nn::Tensor& w = loaded.state.replicated.at("model").tensors.at("0.weight");
  ASSERT_EQ(w.numel(), (std::size_t{32} << 20) / sizeof(float));
  for (const std::size_t i : {std::size_t{0}, std::size_t{12345}, w.numel() - 1}) {
    EXPECT_EQ(w[i], 1.0f + static_cast<float>(i % (1u << 20)) / 8.0f) << i;
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
