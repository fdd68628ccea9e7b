#pragma once
// Errors raised by the collectives module: every failed MPI call becomes an MpiError whose
// message names the call, the rank and the element count involved, then MPI's error string
// for the code (or "MPI error code N" when MPI cannot describe it: an invalid code, or MPI
// not running), then any detail:
//   "MPI_Allreduce failed on rank 3 (count 1001): MPI_ERR_COUNT: invalid count argument"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mpitrain {

class MpiError : public std::runtime_error {
 public:
  MpiError(std::string_view call, int rank, std::size_t count, int code, std::string_view detail);

  // Returns the MPI error code reported by the failed call (0 for errors detected before MPI).
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// Returns normally when rc is MPI_SUCCESS; otherwise throws MpiError naming call, rank, count.
void check_mpi(int rc, std::string_view call, int rank, std::size_t count);

}  // namespace mpitrain
