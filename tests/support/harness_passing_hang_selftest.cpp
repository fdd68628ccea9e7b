// Checks that a missing collective on a passing path cannot hang the harness: at 2 ranks,
// rank 1 leaves the test before a collective that rank 0 enters and never leaves, WITHOUT
// failing. Rank 1 must end the job within its passing wait (10 x MPITRAIN_TEST_PEER_WAIT_S)
// with a non-zero exit code and a message naming the test and rank 0, which did not arrive.
// CTest runs this binary expecting that failure (see tests/CMakeLists.txt); it is not part
// of any other suite.

#include <gtest/gtest.h>
#include <mpi.h>

TEST(HarnessPassingHangSelfTest, Rank1LeavesBeforeACollectiveWithoutFailing) {
  int rank = 0;
  ASSERT_EQ(MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_SUCCESS);
  // A duplicate, as every Communicator under test works on one.
  MPI_Comm comm = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  if (rank == 1) return;  // the bug under test: a passing path that skips the barrier
  // Rank 0 waits here for rank 1, which never comes.
  EXPECT_EQ(MPI_Barrier(comm), MPI_SUCCESS);
  EXPECT_EQ(MPI_Comm_free(&comm), MPI_SUCCESS);
}
