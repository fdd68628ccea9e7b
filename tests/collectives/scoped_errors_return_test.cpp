// ScopedErrorsReturn: within the scope an erroneous call on the host's communicator returns
// its error code (no abort); afterwards the host's handler is back, whichever it was. The
// Communicator constructors use it on the communicator they duplicate.

#include "mpitrain/collectives/detail/scoped_errors_return.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

// Returns the handler `comm` has now (a reference the caller need not free: it is freed here
// and compared by value, which MPI's handles allow for predefined handlers).
MPI_Errhandler handler_of(MPI_Comm comm) {
  MPI_Errhandler h = MPI_ERRHANDLER_NULL;
  EXPECT_EQ(MPI_Comm_get_errhandler(comm, &h), MPI_SUCCESS);
  const MPI_Errhandler value = h;
  MPI_Errhandler_free(&h);
  return value;
}

TEST(ScopedErrorsReturn, ErrorsReturnWithinTheScopeAndTheHandlerComesBack) {
  int size = 0;
  ASSERT_EQ(MPI_Comm_size(MPI_COMM_WORLD, &size), MPI_SUCCESS);
  ASSERT_EQ(handler_of(MPI_COMM_WORLD), MPI_ERRORS_ARE_FATAL);  // MPI's default
  {
    const detail::ScopedErrorsReturn scope(MPI_COMM_WORLD, 0);
    EXPECT_EQ(handler_of(MPI_COMM_WORLD), MPI_ERRORS_RETURN);
    // A root outside the world: under the fatal handler this would abort every rank.
    int x = 0;
    const int rc = MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD);
    int error_class = MPI_SUCCESS;
    ASSERT_EQ(MPI_Error_class(rc, &error_class), MPI_SUCCESS);
    EXPECT_EQ(error_class, MPI_ERR_ROOT);
  }
  EXPECT_EQ(handler_of(MPI_COMM_WORLD), MPI_ERRORS_ARE_FATAL);
}

TEST(ScopedErrorsReturn, CommunicatorsLeaveTheHostsHandlerOnTheirParent) {
  const MpiRuntime runtime;
  for (MPI_Errhandler host : {MPI_ERRORS_RETURN, MPI_ERRORS_ARE_FATAL}) {
    ASSERT_EQ(MPI_Comm_set_errhandler(MPI_COMM_WORLD, host), MPI_SUCCESS);
    {
      const Communicator world(runtime);
      EXPECT_EQ(world.allreduce_value(1, ReduceOp::sum), runtime.world_size());
    }
    EXPECT_EQ(handler_of(MPI_COMM_WORLD), host);

    // A communicator of the host's, handed in by its Fortran handle.
    MPI_Comm mine = MPI_COMM_NULL;
    ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &mine), MPI_SUCCESS);  // inherits `host`
    {
      const Communicator sub(runtime, static_cast<std::int64_t>(MPI_Comm_c2f(mine)));
      EXPECT_EQ(sub.size(), runtime.world_size());
    }
    EXPECT_EQ(handler_of(mine), host);
    ASSERT_EQ(MPI_Comm_free(&mine), MPI_SUCCESS);
  }
}

}  // namespace
}  // namespace mpitrain
