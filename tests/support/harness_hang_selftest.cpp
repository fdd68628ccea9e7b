// Checks that a failure cannot hang the harness: at 2 ranks, rank 1 fails an ASSERT_* and
// leaves the test before a collective that rank 0 enters and never leaves. The harness must
// end the job within its peer wait (MPITRAIN_TEST_PEER_WAIT_S, default 30 s) with a non-zero
// exit code and a message naming the test and rank 1. CTest runs this binary expecting that
// failure (see tests/CMakeLists.txt); it is not part of any other suite.

#include <gtest/gtest.h>
#include <mpi.h>

TEST(HarnessHangSelfTest, AssertOnRank1BeforeACollective) {
  int rank = 0;
  ASSERT_EQ(MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_SUCCESS);
  // A duplicate, as every Communicator under test works on one.
  MPI_Comm comm = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  ASSERT_TRUE(rank != 1) << "deliberate failure on rank 1, before the barrier";
  // Rank 0 (and any rank above 1) waits here for rank 1, which never comes.
  EXPECT_EQ(MPI_Barrier(comm), MPI_SUCCESS);
  EXPECT_EQ(MPI_Comm_free(&comm), MPI_SUCCESS);
}
