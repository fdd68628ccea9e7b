#pragma once
// MpiRuntime: RAII ownership of MPI initialisation.
//
// Constructing one initialises MPI with the requested thread level, unless the host program
// already initialised MPI: then it adopts that MPI, checks the thread level, and never
// finalises it (a library linked into an HPC job must not finalise MPI it does not own).
// Failures throw MpiError: the calls on MPI_COMM_WORLD run with MPI_ERRORS_RETURN set for
// their duration (the host's handler, fatal by default, is restored before returning).
// When it initialises MPI itself it sets MPI_ERRORS_RETURN on MPI_COMM_WORLD for good: Open
// MPI 4.1 reports errors of nonblocking collectives (which a Communicator with a timeout
// waits on) through MPI_COMM_WORLD's handler. A host that initialised MPI keeps its handler;
// with the default, fatal one, such an error then ends its job instead of throwing MpiError.

#include <string>

namespace mpitrain {

enum class ThreadLevel { single = 0, funneled = 1, serialized = 2, multiple = 3 };

// Returns the name of the level as MPI spells it ("MPI_THREAD_MULTIPLE", ...).
const char* to_string(ThreadLevel level) noexcept;

class MpiRuntime {
 public:
  // The communication stream of DESIGN.md section 2 calls MPI from a worker thread while the
  // main thread may call it too, hence MPI_THREAD_MULTIPLE by default.
  explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr,
                      ThreadLevel required = ThreadLevel::multiple);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  MpiRuntime(MpiRuntime&&) = delete;
  MpiRuntime& operator=(MpiRuntime&&) = delete;

  // Returns true when this object initialised MPI and will finalise it.
  bool owns_mpi() const noexcept { return owns_; }
  // Returns the thread level MPI provides.
  ThreadLevel thread_level() const noexcept { return provided_; }
  // Returns this process's rank in MPI_COMM_WORLD.
  int world_rank() const noexcept { return world_rank_; }
  // Returns the size of MPI_COMM_WORLD.
  int world_size() const noexcept { return world_size_; }
  // Returns the MPI library's version string (MPI_Get_library_version).
  static std::string library_version();

 private:
  bool owns_ = false;
  ThreadLevel provided_ = ThreadLevel::single;
  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace mpitrain
