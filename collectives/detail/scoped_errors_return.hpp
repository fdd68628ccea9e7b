#pragma once
// ScopedErrorsReturn: MPI_ERRORS_RETURN on a communicator mpitrain does not own (the host's
// MPI_COMM_WORLD, or a communicator the host handed in), for the duration of a scope
// (internal to collectives/).
//
// MPI reports an error through the handler of the communicator the call was made on, and
// MPI_COMM_WORLD's default handler, MPI_ERRORS_ARE_FATAL, aborts the job. mpitrain sets
// MPI_ERRORS_RETURN on its own duplicates, but the calls that create them (MPI_Comm_dup) or
// that run before them (MPI_Comm_rank on MPI_COMM_WORLD) are made on the host's communicator.
// Within this scope those calls return their error code, which check_mpi turns into an
// MpiError; the host's handler is restored when the scope ends, so the host sees no change
// afterwards. While the scope lasts, another thread of the host calling MPI on the same
// communicator would get error codes instead of an abort.

#include <mpi.h>

#include <cstdio>
#include <string>

#include "mpitrain/collectives/mpi_error.hpp"

namespace mpitrain::detail {

class ScopedErrorsReturn {
 public:
  // Saves the handler of `comm` and sets MPI_ERRORS_RETURN; `rank` names this process in
  // errors. Throws MpiError if MPI refuses either call.
  ScopedErrorsReturn(MPI_Comm comm, int rank) : comm_(comm), rank_(rank) {
    check_mpi(MPI_Comm_get_errhandler(comm_, &previous_), "MPI_Comm_get_errhandler", rank, 0);
    const int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
      // The failed set is the error to report; a failure to release the saved handler too
      // is added to its detail.
      const int free_rc = MPI_Errhandler_free(&previous_);
      throw MpiError("MPI_Comm_set_errhandler", rank, 0, rc,
                     free_rc == MPI_SUCCESS
                         ? std::string()
                         : "then MPI_Errhandler_free of the saved handler failed with MPI error "
                           "code " + std::to_string(free_rc));
    }
  }
  // Restores the saved handler and releases the reference MPI_Comm_get_errhandler returned.
  // A destructor cannot throw: a failure is reported on stderr, one line naming the call, the
  // rank and MPI's code (the communicator then keeps MPI_ERRORS_RETURN, or the reference
  // leaks; nothing here can undo either).
  ~ScopedErrorsReturn() {
    const int set_rc = MPI_Comm_set_errhandler(comm_, previous_);
    if (set_rc != MPI_SUCCESS) {
      std::fprintf(stderr,
                   "mpitrain: MPI_Comm_set_errhandler (restoring the host's handler) failed on "
                   "rank %d with MPI error code %d\n",
                   rank_, set_rc);
    }
    const int free_rc = MPI_Errhandler_free(&previous_);
    if (free_rc != MPI_SUCCESS) {
      std::fprintf(stderr,
                   "mpitrain: MPI_Errhandler_free failed on rank %d with MPI error code %d\n",
                   rank_, free_rc);
    }
  }
  ScopedErrorsReturn(const ScopedErrorsReturn&) = delete;
  ScopedErrorsReturn& operator=(const ScopedErrorsReturn&) = delete;

 private:
  MPI_Comm comm_;
  int rank_;  // names this process in messages
  MPI_Errhandler previous_ = MPI_ERRHANDLER_NULL;
};

}  // namespace mpitrain::detail
