// Crash safety of the commit protocol, single process: a job killed with SIGKILL in the
// middle of a save (a separate executable, so MPI and fork never mix) leaves the previous
// checkpoint committed and loadable, and its temporary folder is removed when the next job
// starts. A real "No space left on device" is disk_full_test.cpp's.

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "checkpoint_test_util.hpp"
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

TEST(CheckpointCrash, SigkillDuringSaveKeepsThePreviousCheckpoint) {
  MpiRuntime runtime;
  const Communicator comm(runtime);
  TempDir dir("crash");
  const fs::path project = dir.path() / "run";
  const fs::path ckpts = project / "checkpoints";

  // 32 MiB per checkpoint: a save takes tens of milliseconds, a wide target for the kill.
  const testing::ChildProcess child = testing::spawn_process({MPITRAIN_SAVE_FOREVER, project.string(), "32"});
  Fd output(child.output_fd);
  for (int k = 0; k < 2; ++k) {
    const std::optional<std::string> line = testing::read_line(output.get());
    ASSERT_TRUE(line.has_value()) << "the helper exited early";
    ASSERT_EQ(*line, "committed " + std::to_string(k));
  }

  // The helper is now saving checkpoint_2 (or about to): wait until its temporary folder
  // holds state.h5, which is being written, then kill without warning.
  Fd watch(inotify_init1(IN_CLOEXEC));
  ASSERT_GE(watch.get(), 0);
  ASSERT_GE(inotify_add_watch(watch.get(), ckpts.c_str(), IN_CREATE), 0);
  std::string temp;
  while ((temp = find_temp(ckpts)).empty()) wait_for_event(watch.get());
  ASSERT_EQ(temp.rfind("checkpoint_2.tmp-", 0), 0u) << temp;
  const fs::path temp_dir = ckpts / temp;
  ASSERT_GE(inotify_add_watch(watch.get(), temp_dir.c_str(), IN_CREATE), 0);
  while (!fs::exists(temp_dir / "state.h5")) wait_for_event(watch.get());
  ASSERT_EQ(::kill(child.pid, SIGKILL), 0);
  const int status = testing::wait_for(child.pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;

  // Killed mid-save: the temporary folder is still there, checkpoint_2 was never committed.
  ASSERT_TRUE(fs::exists(temp_dir));
  ASSERT_FALSE(fs::exists(ckpts / "checkpoint_2"));
  const std::vector<CheckpointInfo> before = list_checkpoints(ckpts);
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(before.back().number, 1);

  // The next job cleans up and resumes from checkpoint_1.
  ProjectConfiguration config;
  config.project_dir = project;
  CheckpointManager manager(config, comm);
  EXPECT_EQ(manager.removed_at_start(), std::vector<fs::path>{temp_dir});
  EXPECT_TRUE(find_temp(ckpts).empty());
  EXPECT_EQ(manager.latest(), ckpts / "checkpoint_1");
  EXPECT_EQ(manager.next_iteration(), 2);
  const LoadedCheckpoint loaded = manager.load_latest(comm);
  EXPECT_EQ(loaded.state.replicated.at("engine").integers.at("step"), 1);
  const nn::Tensor& w = loaded.state.replicated.at("model").tensors.at("0.weight");
  ASSERT_EQ(w.numel(), (std::size_t{32} << 20) / sizeof(float));
  for (const std::size_t i : {std::size_t{0}, std::size_t{12345}, w.numel() - 1}) {
    EXPECT_EQ(w[i], 1.0f + static_cast<float>(i % (1u << 20)) / 8.0f) << i;
  }
}

}  // namespace
}  // namespace mpitrain::checkpoint
