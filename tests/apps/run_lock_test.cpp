#include "run_lock.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "temp_dir.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;

std::string content(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(RunLock, HeldLockNamesItsHolderAndIsReleasedWithTheObject) {
  const test_support::TempDir temp("run_lock");
  const fs::path& dir = temp.path();
  std::string holder;
  {
    std::optional<RunLock> first = RunLock::try_acquire(dir, holder);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->file(), dir / ".mpitrain.lock");
    const std::string text = content(dir / ".mpitrain.lock");
    EXPECT_TRUE(text.starts_with("pid " + std::to_string(::getpid()) + "\nhost ")) << text;
    EXPECT_NE(text.find("\nsince "), std::string::npos) << text;
    // flock belongs to the open file description: a second open in this process conflicts
    // as another process's would.
    EXPECT_FALSE(RunLock::try_acquire(dir, holder).has_value());
    EXPECT_TRUE(holder.starts_with("pid " + std::to_string(::getpid()) + " on ")) << holder;
    EXPECT_NE(holder.find(" since "), std::string::npos) << holder;
    // A moved lock is still held.
    const RunLock moved = std::move(*first);
    first.reset();
    EXPECT_FALSE(RunLock::try_acquire(dir, holder).has_value());
  }
  EXPECT_TRUE(RunLock::try_acquire(dir, holder).has_value());
  EXPECT_TRUE(fs::exists(dir / ".mpitrain.lock"));  // never unlinked
}

TEST(RunLock, DescribesTheHolder) {
  EXPECT_EQ(describe_lock_holder("pid 12\nhost node3\nsince 2026-01-02T03:04:05Z\n"),
            "pid 12 on node3 since 2026-01-02T03:04:05Z");
  EXPECT_EQ(describe_lock_holder(""), "an unknown process");
  EXPECT_EQ(describe_lock_holder("pid 7\n"), "pid 7 on ? since ?");
}

TEST(RunLock, AFolderThatDoesNotExistThrowsNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / "mpitrain_run_lock_nowhere" / "deeper";
  std::string holder;
  try {
    RunLock::try_acquire(dir, holder);
    FAIL() << "expected std::system_error";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / ".mpitrain.lock").string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpitrain::app
