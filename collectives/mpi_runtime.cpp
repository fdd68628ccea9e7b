#include "mpitrain/collectives/mpi_runtime.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/detail/scoped_errors_return.hpp"

namespace mpitrain {
namespace {

int to_mpi(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::single: return MPI_THREAD_SINGLE;
    case ThreadLevel::funneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::serialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::multiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_MULTIPLE;
}

ThreadLevel from_mpi(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return ThreadLevel::multiple;
  if (level >= MPI_THREAD_SERIALIZED) return ThreadLevel::serialized;
  if (level >= MPI_THREAD_FUNNELED) return ThreadLevel::funneled;
  return ThreadLevel::single;
}

}  // namespace

const char* to_string(ThreadLevel level) noexcept {
  switch (level) {
    case ThreadLevel::single: return "MPI_THREAD_SINGLE";
    case ThreadLevel::funneled: return "MPI_THREAD_FUNNELED";
    case ThreadLevel::serialized: return "MPI_THREAD_SERIALIZED";
    case ThreadLevel::multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

MpiRuntime::MpiRuntime(int* argc, char*** argv, ThreadLevel required) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized", -1, 0);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    int finalized = 0;
    check_mpi(MPI_Finalized(&finalized), "MPI_Finalized", -1, 0);
    if (finalized) throw MpiError("MpiRuntime", -1, 0, MPI_SUCCESS, "MPI was already finalised");
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread", -1, 0);
  } else {
    check_mpi(MPI_Init_thread(argc, argv, to_mpi(required), &provided), "MPI_Init_thread", -1, 0);
    owns_ = true;
  }
  provided_ = from_mpi(provided);
  if (owns_) {
    // Open MPI 4.1 reports the error of a nonblocking collective's request (every collective
    // with a timeout waits on one) through MPI_COMM_WORLD's handler, not through that of
    // the communicator the collective ran on. MPI is ours, so its world returns errors too,
    // and check_mpi turns them into MpiError instead of ending the job.
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
              "MPI_Comm_set_errhandler (MPI_COMM_WORLD)", -1, 0);
  }
  {
    // MPI_COMM_WORLD's handler is the host's (by default fatal): return errors instead.
    const detail::ScopedErrorsReturn errors_return(MPI_COMM_WORLD, -1);
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank", -1, 0);
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size", world_rank_, 0);
  }
  if (provided < to_mpi(required)) {
    const std::string detail = std::string("MPI provides ") + to_string(provided_) +
                               " but mpitrain needs " + to_string(required);
    if (owns_) {
      owns_ = false;
      // Giving up the MPI we just initialised: a failure to finalise it is the error to
      // report, with the reason we gave up as its detail.
      const int rc = MPI_Finalize();
      if (rc != MPI_SUCCESS) {
        throw MpiError("MPI_Finalize", world_rank_, 0, rc, "while giving up MPI: " + detail);
      }
    }
    throw MpiError(initialized ? "MpiRuntime (adopting MPI)" : "MPI_Init_thread", world_rank_, 0,
                   MPI_SUCCESS, detail);
  }
}

// A destructor cannot throw, and nothing can be retried once finalising failed: a failure is
// reported on stderr (one line naming the call, the rank and MPI's code) and MPI is left as
// it is. If MPI cannot even say whether it is finalised, it is not finalised again (finalising
// twice is erroneous, and the launcher reports a process that exits without finalising).
MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  int finalized = 0;
  const int rc = MPI_Finalized(&finalized);
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "mpitrain: MPI_Finalized failed on rank %d with MPI error code %d; "
                 "MPI is not finalised\n", world_rank_, rc);
    return;
  }
  if (finalized) return;
  const int finalize_rc = MPI_Finalize();
  if (finalize_rc != MPI_SUCCESS) {
    std::fprintf(stderr, "mpitrain: MPI_Finalize failed on rank %d with MPI error code %d\n",
                 world_rank_, finalize_rc);
  }
}

std::string MpiRuntime::library_version() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  check_mpi(MPI_Get_library_version(version, &len), "MPI_Get_library_version", -1, 0);
  // Open MPI 4.1 counts the terminating NUL in len: stop at the first NUL.
  const std::size_t limit = std::min(static_cast<std::size_t>(std::max(len, 0)), sizeof version);
  return std::string(version, std::find(version, version + limit, '\0'));
}

}  // namespace mpitrain
