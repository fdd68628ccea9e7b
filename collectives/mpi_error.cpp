#include "mpitrain/collectives/mpi_error.hpp"

#include <mpi.h>

#include <string>

namespace mpitrain {
namespace {

std::string describe(std::string_view call, int rank, std::size_t count, int code,
                     std::string_view detail) {
  std::string msg(call);
  msg += " failed on rank " + std::to_string(rank) + " (count " + std::to_string(count) + ")";
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) == MPI_SUCCESS) {
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
