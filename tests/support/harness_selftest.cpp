// Checks the harness itself: a test that fails on the last rank only must be reported as
// failed on every rank. CTest runs this binary expecting failure (see tests/CMakeLists.txt);
// it is not part of any other suite.

#include <gtest/gtest.h>
#include <mpi.h>

TEST(HarnessSelfTest, FailsOnLastRankOnly) {
  int rank = 0;
  int size = 1;
  ASSERT_EQ(MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_SUCCESS);
  ASSERT_EQ(MPI_Comm_size(MPI_COMM_WORLD, &size), MPI_SUCCESS);
  EXPECT_NE(rank, size - 1) << "deliberate failure on the last rank";
}
