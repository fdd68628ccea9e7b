// MpiRuntime linked into a host program that initialised MPI itself, at
// MPI_THREAD_FUNNELED, and finalises it itself. This binary has its own main (the host):
// the shared test main would initialise MPI through MpiRuntime at MPI_THREAD_MULTIPLE.
//
// - A runtime that needs MPI_THREAD_MULTIPLE refuses the host's MPI with an MpiError naming
//   both levels, and leaves that MPI running.
// - A runtime content with less adopts it: owns_mpi() is false, thread_level() is the host's.
// - No runtime finalises the host's MPI: main checks that MPI is still running after every
//   test, then finalises it as a host does.
// Output and outcome as in tests/support/mpi_test_main.cpp: rank 0 prints, other ranks print
// their failures, and a failure on any rank fails the run on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

int world_rank() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

TEST(MpiRuntimeInHost, RefusesALevelTheHostDoesNotProvide) {
  try {
    const MpiRuntime runtime;  // needs MPI_THREAD_MULTIPLE
    FAIL() << "adopted an MPI at MPI_THREAD_FUNNELED as MPI_THREAD_MULTIPLE";
  } catch (const MpiError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("MpiRuntime (adopting MPI)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(world_rank())), std::string::npos) << msg;
    EXPECT_NE(msg.find("MPI provides MPI_THREAD_FUNNELED but mpitrain needs MPI_THREAD_MULTIPLE"),
              std::string::npos)
        << msg;
  }
  try {
    const MpiRuntime runtime(nullptr, nullptr, ThreadLevel::serialized);
    FAIL() << "adopted an MPI at MPI_THREAD_FUNNELED as MPI_THREAD_SERIALIZED";
  } catch (const MpiError& e) {
    EXPECT_NE(std::string(e.what()).find("needs MPI_THREAD_SERIALIZED"), std::string::npos)
        << e.what();
  }
  int finalized = 1;
  ASSERT_EQ(MPI_Finalized(&finalized), MPI_SUCCESS);
  EXPECT_FALSE(finalized);  // refusing did not finalise the host's MPI
}

TEST(MpiRuntimeInHost, AdoptsTheHostsLevel) {
  for (ThreadLevel level : {ThreadLevel::single, ThreadLevel::funneled}) {
    SCOPED_TRACE(to_string(level));
    const MpiRuntime runtime(nullptr, nullptr, level);
    EXPECT_FALSE(runtime.owns_mpi());
    EXPECT_EQ(runtime.thread_level(), ThreadLevel::funneled);
    EXPECT_EQ(runtime.world_rank(), world_rank());
    // Collectives work from the main thread, the one MPI_THREAD_FUNNELED allows.
    const Communicator comm(runtime);
    EXPECT_EQ(comm.allreduce_value(comm.rank() + 1, ReduceOp::sum),
              comm.size() * (comm.size() + 1) / 2);
  }
}

// Prints the failed assertions of ranks other than 0, which have no default printer.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "unknown", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace mpitrain

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "host: MPI_Init_thread failed\n");
    return 1;
  }
  const int rank = mpitrain::world_rank();
  if (provided != MPI_THREAD_FUNNELED) {
    // The tests assume the level asked for; an MPI that gives another one cannot run them.
    std::fprintf(stderr, "[rank %d] host: asked MPI for MPI_THREAD_FUNNELED, got level %d\n",
                 rank, provided);
    MPI_Finalize();
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mpitrain::RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int finalized = 1;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) {
    std::fprintf(stderr, "[rank %d] host: mpitrain finalised the host's MPI\n", rank);
    return 1;  // no MPI left to agree with the other ranks: each one reports for itself
  }
  int any_failed = 0;
  if (MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) {
    any_failed = 1;
  }
  if (any_failed && !failed) {
    std::fprintf(stderr, "[rank %d] host: a test failed on another rank\n", rank);
  }
  MPI_Finalize();
  return any_failed;
}
