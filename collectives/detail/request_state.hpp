#pragma once
// Request::State: what a nonblocking collective keeps until it completes (internal to
// collectives/): the MPI requests, the buffers and arrays MPI reads or writes meanwhile, and
// the steps that finish the result once every request completed.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/collectives/request.hpp"

namespace mpitrain {

struct Request::State {
  int rank = 0;
  std::string call;  // for error messages
  std::size_t count = 0;
  std::vector<MPI_Request> reqs;
  std::vector<std::unique_ptr<float[]>> stages;        // fp32 staging (16-bit averages)
  std::vector<std::vector<int>> int_arrays;            // MPI_Iallgatherv counts, displacements
  std::vector<std::function<void()>> finishers;        // run in order after every request
  bool done = false;
  // How long wait() waits (zero: for ever), and what it calls when that passes (the
  // Communicator's report; without one, wait() throws detail::WaitExpired).
  std::chrono::nanoseconds timeout{0};
  std::function<void(std::chrono::nanoseconds)> on_expired;

  // Marks the state done and runs the finishers.
  void complete();
};

}  // namespace mpitrain
