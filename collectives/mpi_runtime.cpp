#include "mpitrain/collectives/mpi_runtime.hpp"

#include <mpi.h>

#include <algorithm>
#include <string>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/scoped_errors_return.hpp"

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
  {
    // MPI_COMM_WORLD's handler is the host's (by default fatal): return errors instead.
    const detail::ScopedErrorsReturn errors_return(MPI_COMM_WORLD, -1);
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank", -1, 0);
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size", world_rank_, 0);
  }
  if (provided < to_mpi(required)) {
    const std::string detail = std::string("MPI provides ") + to_string(provided_) +
                               " but mpitrain needs " + to_string(required);
    if (owns_) MPI_Finalize();
    owns_ = false;
    throw MpiError(initialized ? "MpiRuntime (adopting MPI)" : "MPI_Init_thread", world_rank_, 0,
                   MPI_SUCCESS, detail);
  }
}

MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
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
