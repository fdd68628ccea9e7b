// TempDir and SharedTempDir: fresh and empty when made, distinct for the same tag, the same
// folder on every rank for a shared one, and gone with their contents afterwards.

#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mpitrain/checkpoint/rank_agreement.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain::test_support {
namespace {

namespace fs = std::filesystem;

TEST(TempDir, IsFreshEmptyDistinctAndRemovedWithItsContents) {
  fs::path kept;
  {
    const TempDir a("temp_dir_test");
    const TempDir b("temp_dir_test");
    EXPECT_NE(a.path(), b.path());
    ASSERT_TRUE(fs::is_directory(a.path()));
    EXPECT_TRUE(fs::is_empty(a.path()));
    EXPECT_EQ(a.path().parent_path(), fs::temp_directory_path());
    EXPECT_NE(a.path().filename().string().find("temp_dir_test"), std::string::npos);
    EXPECT_EQ(a / "x", a.path() / "x");
    EXPECT_EQ(a.file("x"), (a.path() / "x").string());
    fs::create_directories(a / "nested" / "deeper");
    std::ofstream(a / "nested" / "deeper" / "file") << "contents";
    kept = a.path();
  }
  EXPECT_FALSE(fs::exists(kept));
}

TEST(SharedTempDir, IsTheSameFolderOnEveryRankAndGoneAfterItsScope) {
  MpiRuntime runtime;
  const Communicator comm(runtime);
  std::string path;
  {
    const SharedTempDir dir(comm, "shared_temp_dir_test");
    path = dir.path().string();
    EXPECT_EQ(checkpoint::broadcast_string(comm, path, 0), path) << "rank " << comm.rank();
    if (comm.rank() == 0) std::ofstream(dir / "from_rank_0") << "0";
    comm.barrier();
    EXPECT_TRUE(fs::exists(dir / "from_rank_0")) << "rank " << comm.rank();
  }
  // The destructor's barrier comes before rank 0 removes the folder, so this one orders the
  // removal before every rank's check.
  comm.barrier();
  EXPECT_FALSE(fs::exists(path)) << "rank " << comm.rank();
}

}  // namespace
}  // namespace mpitrain::test_support
