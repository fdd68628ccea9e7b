// MpiRuntime inside a program whose MPI is already running (the test harness initialised it
// at MPI_THREAD_MULTIPLE, as a host program would): the runtime adopts it, reports its
// thread level and world, and leaves it running when destroyed. Also the level names and
// the library version. tests/collectives/mpi_runtime_host_test.cpp covers a host at a lower
// thread level.

#include "mpitrain/collectives/mpi_runtime.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <string>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain {
namespace {

// Returns the thread level MPI reports, as a ThreadLevel.
ThreadLevel queried_level() {
  int provided = -1;
  EXPECT_EQ(MPI_Query_thread(&provided), MPI_SUCCESS);
  switch (provided) {
    case MPI_THREAD_SINGLE: return ThreadLevel::single;
    case MPI_THREAD_FUNNELED: return ThreadLevel::funneled;
    case MPI_THREAD_SERIALIZED: return ThreadLevel::serialized;
    default: break;
  }
  EXPECT_EQ(provided, MPI_THREAD_MULTIPLE);
  return ThreadLevel::multiple;
}

TEST(MpiRuntime, AdoptsTheHostsMpi) {
  const MpiRuntime runtime;
  EXPECT_FALSE(runtime.owns_mpi());
  // The harness asked for MPI_THREAD_MULTIPLE, which Open MPI provides.
  EXPECT_EQ(queried_level(), ThreadLevel::multiple);
  EXPECT_EQ(runtime.thread_level(), ThreadLevel::multiple);
  int rank = -1;
  int size = -1;
  ASSERT_EQ(MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_SUCCESS);
  ASSERT_EQ(MPI_Comm_size(MPI_COMM_WORLD, &size), MPI_SUCCESS);
  EXPECT_EQ(runtime.world_rank(), rank);
  EXPECT_EQ(runtime.world_size(), size);
}

TEST(MpiRuntime, AdoptingAcceptsEveryLevelUpToTheProvidedOne) {
  for (ThreadLevel level : {ThreadLevel::single, ThreadLevel::funneled, ThreadLevel::serialized,
                            ThreadLevel::multiple}) {
    SCOPED_TRACE(to_string(level));
    const MpiRuntime runtime(nullptr, nullptr, level);
    EXPECT_FALSE(runtime.owns_mpi());
    EXPECT_EQ(runtime.thread_level(), queried_level());  // what MPI provides, not the request
  }
}

TEST(MpiRuntime, DestroyingAnAdoptingRuntimeLeavesMpiRunning) {
  int size = 0;
  {
    const MpiRuntime runtime;
    size = runtime.world_size();
    const Communicator comm(runtime);
    EXPECT_EQ(comm.allreduce_value(1, ReduceOp::sum), size);
  }
  int initialized = 0;
  int finalized = 1;
  ASSERT_EQ(MPI_Initialized(&initialized), MPI_SUCCESS);
  ASSERT_EQ(MPI_Finalized(&finalized), MPI_SUCCESS);
  EXPECT_TRUE(initialized);
  EXPECT_FALSE(finalized);
  // The host's MPI still works, and a second runtime adopts it again.
  int one = 1;
  int sum = 0;
  ASSERT_EQ(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(sum, size);
  const MpiRuntime again;
  EXPECT_FALSE(again.owns_mpi());
  EXPECT_EQ(Communicator(again).allreduce_value(2, ReduceOp::sum), 2 * size);
}

TEST(MpiRuntime, ThreadLevelNamesAreMpis) {
  EXPECT_STREQ(to_string(ThreadLevel::single), "MPI_THREAD_SINGLE");
  EXPECT_STREQ(to_string(ThreadLevel::funneled), "MPI_THREAD_FUNNELED");
  EXPECT_STREQ(to_string(ThreadLevel::serialized), "MPI_THREAD_SERIALIZED");
  EXPECT_STREQ(to_string(ThreadLevel::multiple), "MPI_THREAD_MULTIPLE");
  EXPECT_STREQ(to_string(static_cast<ThreadLevel>(7)), "unknown");
}

TEST(MpiRuntime, LibraryVersionIsMpis) {
  const std::string version = MpiRuntime::library_version();
  EXPECT_FALSE(version.empty());
  // No terminating NUL inside the string (Open MPI counts it in the length it returns).
  EXPECT_EQ(version.find('\0'), std::string::npos);
  char expected[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  ASSERT_EQ(MPI_Get_library_version(expected, &len), MPI_SUCCESS);
  EXPECT_EQ(version, std::string(expected));
}

TEST(MpiRuntime, LeavesTheHostsErrorHandlerOnTheWorld) {
  // The runtime's calls on MPI_COMM_WORLD return errors instead of aborting while they run
  // (scoped_errors_return.hpp); afterwards the world has the host's handler again, whichever
  // it was.
  for (MPI_Errhandler host : {MPI_ERRORS_RETURN, MPI_ERRORS_ARE_FATAL}) {
    ASSERT_EQ(MPI_Comm_set_errhandler(MPI_COMM_WORLD, host), MPI_SUCCESS);
    { const MpiRuntime runtime; }
    MPI_Errhandler now = MPI_ERRHANDLER_NULL;
    ASSERT_EQ(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &now), MPI_SUCCESS);
    EXPECT_EQ(now, host);
    MPI_Errhandler_free(&now);
  }
}

}  // namespace
}  // namespace mpitrain
