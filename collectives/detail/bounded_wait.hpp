#pragma once
// Bounded waits for MPI requests (internal to collectives/): every place where a rank waits
// for its peers through MPI (blocking MPI calls, which become their nonblocking twin plus this
// wait when a deadline is set; the ring's messages; Request::wait) waits here.
//
// A blocking MPI collective cannot be interrupted, so a bounded wait posts the nonblocking
// form and polls MPI_Testall: MPI progresses the collective inside each test, as inside
// MPI_Wait. It polls without pause for the first kBusyPolls tests (a collective that completes
// within microseconds is not slowed down), then yields the core between tests (on a node with
// no spare core a spinning waiter would take the core of the rank it waits for) and reads the
// clock every few tests. Without a deadline (timeout 0) it is MPI_Waitall, as before.

#include <mpi.h>

#include <chrono>
#include <exception>

namespace mpitrain::detail {

// Thrown by wait_requests when the deadline passed; the Communicator turns it into the report
// of collective_timeout.hpp (it knows which collective waited).
class WaitExpired : public std::exception {
 public:
  explicit WaitExpired(std::chrono::nanoseconds waited) noexcept : waited_(waited) {}
  std::chrono::nanoseconds waited() const noexcept { return waited_; }
  const char* what() const noexcept override { return "a wait for peers passed its deadline"; }

 private:
  std::chrono::nanoseconds waited_;
};

// Returns MPI_SUCCESS once every one of the `n` requests completed, or the MPI error code
// (the failed request's own, e.g. MPI_ERR_TRUNCATE, rather than MPI_ERR_IN_STATUS).
// timeout > 0: throws WaitExpired once `timeout` has passed since the call began with a
// request unfinished (the requests stay posted; the communicator is unusable afterwards).
int wait_requests(MPI_Request* reqs, int n, std::chrono::nanoseconds timeout);

}  // namespace mpitrain::detail
