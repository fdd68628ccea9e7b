// A real "No space left on device" during a save: a 4 MiB tmpfs fills up, and the save
// fails cleanly (the error names ENOSPC, earlier checkpoints are intact, no temporary folder
// is left, and the space comes back for the next save).
//
// Mounting a tmpfs needs CAP_SYS_ADMIN in the mount namespace. The test therefore runs
// itself again (the same binary, this one test) under unshare(1) in a new mount namespace:
// `unshare -m` as root, `unshare -Urm` otherwise (a user namespace in which the caller is
// root; most Linux systems allow it without privileges). The tmpfs is private to that
// namespace and vanishes with it, even if the child is killed. If no namespace can be made
// (unshare(1) itself reports an error and never runs the binary), or the mount is refused
// inside it, the test is skipped with the reason (never passed). A child that ran but did
// not get to the test (MPI_Init failed inside the namespace, the binary crashed, ...) fails
// the test with its output.

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

#ifndef MPITRAIN_UNSHARE
#error "CMake passes the path of unshare(1), or an empty string when it has none"
#endif

namespace mpitrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Set in the child's environment: the folder to mount the tmpfs on.
constexpr const char* kMountVariable = "MPITRAIN_DISK_FULL_TEST_MOUNT";
constexpr const char* kTestName = "CheckpointDiskFull.NoSpaceLeftOnDeviceFailsTheSaveCleanly";

// Returns the entries of `dir` whose name contains ".tmp-".
std::vector<std::string> temp_entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos) out.push_back(name);
  }
  return out;
}

// The test proper, in the child: `mnt` is an empty folder this process may mount on.
void save_into_a_full_file_system(const fs::path& mnt) {
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m") != 0) {
    GTEST_SKIP() << "mount -t tmpfs inside a new mount namespace was refused ("
                 << std::strerror(errno) << "): no real ENOSPC can be produced here";
  }
  MpiRuntime runtime;
  const Communicator comm(runtime);
  ProjectConfiguration config;
  config.project_dir = mnt / "run";
  CheckpointManager manager(config, comm);
  manager.save(testing::make_state(0, 1), comm);

  CheckpointState big = testing::make_state(0, 2);
  big.replicated["model"].tensors["huge"] = testing::closed_form_tensor({2 << 20}, 0.0f);  // 8 MiB
  try {
    manager.save(big, comm);
    ADD_FAILURE() << "saving 8 MiB into a 4 MiB file system must fail";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(temp_entries(manager.checkpoints_dir()).empty());
  ASSERT_EQ(manager.list().size(), 1u);
  testing::expect_same_state(manager.load_latest(comm).state, testing::make_state(0, 1));
  // The space of the failed attempt was given back: a small save fits again.
  EXPECT_EQ(manager.save(testing::make_state(0, 3), comm).number, 1);
  ::umount2(mnt.c_str(), MNT_DETACH);  // the namespace's end would unmount it too
}

// Returns true when `output` (stdout and stderr) and exit code `code` of a run of
// unshare(1) at path `unshare` are unshare's own refusal to make the namespace: it failed
// before running the binary, so its output is only its error message, which starts with
// "unshare: " ("unshare: unshare failed: Operation not permitted", "unshare: write failed
// /proc/self/uid_map: ...") or, for an option this unshare does not know, with its path.
// Not when it could not execute the binary ("unshare: failed to execute ..."): that is the
// test's own fault.
bool unshare_refused(const std::string& unshare, const std::string& output, int code) {
  const bool from_unshare =
      output.rfind("unshare: ", 0) == 0 || output.rfind(unshare + ": ", 0) == 0;
  return code != 0 && from_unshare && output.find("failed to execute") == std::string::npos;
}

// Returns the path of this executable.
std::string self_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

TEST(CheckpointDiskFull, NoSpaceLeftOnDeviceFailsTheSaveCleanly) {
  if (const char* mnt = std::getenv(kMountVariable)) {
    save_into_a_full_file_system(mnt);
    return;
  }
  const std::string unshare = MPITRAIN_UNSHARE;
  if (unshare.empty()) GTEST_SKIP() << "unshare(1) was not found: no namespace to mount a tmpfs in";
  const std::string self = self_executable();
  ASSERT_FALSE(self.empty()) << "/proc/self/exe cannot be read";

  TempDir dir("enospc");
  const fs::path mnt = dir.path() / "mnt";
  fs::create_directories(mnt);
  // Inside a user namespace the child is uid 0, which Open MPI refuses unless told; and its
  // session folder would be /tmp/ompi.<host>.0, which real root may own: it gets one here.
  const fs::path session = dir.path() / "mpi_session";
  fs::create_directories(session);
  const std::vector<std::string> env{std::string(kMountVariable) + "=" + mnt.string(),
                                     "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                     "OMPI_MCA_orte_tmpdir_base=" + session.string()};
  std::vector<std::vector<std::string>> ways;
  if (::geteuid() == 0) ways.push_back({unshare, "-m"});
  ways.push_back({unshare, "-Urm"});

  std::string refused;
  for (std::vector<std::string> argv : ways) {
    const std::string how = argv.at(0) + " " + argv.at(1);
    argv.insert(argv.end(), {self, "--gtest_filter=" + std::string(kTestName)});
    std::string output;
    const int code = testing::run_process(argv, output, env);
    if (output.find("[==========]") == std::string::npos) {
      if (unshare_refused(unshare, output, code)) {
        refused += "\n" + how + " (exit code " + std::to_string(code) + "): " + output;
        continue;
      }
      FAIL() << "the child under " << how << " ran the binary but the test never started "
             << "(exit code " << code << "):\n" << output;
    }
    std::cout << "[ child under " << how << " ]\n" << output;
    if (output.find("[  SKIPPED ] " + std::string(kTestName)) != std::string::npos) {
      GTEST_SKIP() << "skipped in the namespace made by " << how << " (output above)";
    }
    EXPECT_EQ(code, 0) << output;
    EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
    return;
  }
  GTEST_SKIP() << "no mount namespace could be made, so no tmpfs to fill:" << refused;
}

}  // namespace
}  // namespace mpitrain::checkpoint
