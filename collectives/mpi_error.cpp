#include "mpitrain/collectives/mpi_error.hpp"

#include <mpi.h>

#include <algorithm>
#include <string>

namespace mpitrain {
namespace {

// Returns true when MPI_Error_string may be asked about `code`. Open MPI hands an invalid
// code, or a call before MPI_Init or after MPI_Finalize, to MPI_COMM_WORLD's error handler,
// fatal by default: describing an error must not abort the job. Valid codes run from 0 to
// the MPI_LASTUSEDCODE attribute (MPI_ERR_LASTCODE plus any MPI_Add_error_code).
bool can_describe(int code) noexcept {
  int initialized = 0;
  int finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return false;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return false;
  int last = MPI_ERR_LASTCODE;
  int* attr = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &attr, &flag) == MPI_SUCCESS && flag) {
    last = std::max(last, *attr);
  }
  return code > MPI_SUCCESS && code <= last;
}

std::string describe(std::string_view call, int rank, std::size_t count, int code,
                     std::string_view detail) {
  std::string msg(call);
  msg += " failed on rank " + std::to_string(rank) + " (count " + std::to_string(count) + ")";
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (can_describe(code) && MPI_Error_string(code, text, &len) == MPI_SUCCESS) {
      msg += ": ";
      msg.append(text, static_cast<std::size_t>(len));
    } else {
      msg += ": MPI error code " + std::to_string(code);
    }
  }
  if (!detail.empty()) {
    msg += ": ";
    msg += detail;
  }
  return msg;
}

}  // namespace

MpiError::MpiError(std::string_view call, int rank, std::size_t count, int code,
                   std::string_view detail)
    : std::runtime_error(describe(call, rank, count, code, detail)), code_(code) {}

void check_mpi(int rc, std::string_view call, int rank, std::size_t count) {
  if (rc != MPI_SUCCESS) throw MpiError(call, rank, count, rc, {});
}

}  // namespace mpitrain
