// Checks how the harness reports skipped tests (CTest runs this binary with a --gtest_filter
// per case, see tests/CMakeLists.txt; it is not part of any other suite):
//   Skips alone          exit 0 and the "every test of this run was skipped" line;
//   Skips and Passes     exit 0 without that line (the binary passed);
//   Skips and Fails      non-zero exit without that line (a skip never hides a failure).

#include <gtest/gtest.h>
#include <mpi.h>

namespace {

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

TEST(HarnessSkipSelfTest, Skips) { GTEST_SKIP() << "deliberate skip on every rank"; }

TEST(HarnessSkipSelfTest, Passes) { EXPECT_GE(world_size(), 1); }

TEST(HarnessSkipSelfTest, Fails) { ADD_FAILURE() << "deliberate failure on every rank"; }

}  // namespace
