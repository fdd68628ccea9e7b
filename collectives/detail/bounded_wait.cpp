// wait_requests (see bounded_wait.hpp). Cost without a deadline: one MPI_Waitall. With one:
// one MPI_Testall per poll, a clock read every kPollsPerClockRead polls (~20 ns).

#include "mpitrain/collectives/detail/bounded_wait.hpp"

#include <sched.h>

namespace mpitrain::detail {
namespace {

// Tests before the waiter starts yielding its core between tests: a few microseconds.
constexpr int kBusyPolls = 64;
constexpr int kPollsPerClockRead = 16;

}  // namespace

int wait_requests(MPI_Request* reqs, int n, std::chrono::nanoseconds timeout) {
  if (n == 0) return MPI_SUCCESS;
  if (timeout.count() <= 0) return MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (long polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    if (polls < kBusyPolls) continue;
    sched_yield();
    if (polls % kPollsPerClockRead == 0) {
      const auto waited = Clock::now() - start;
      if (waited > timeout) throw WaitExpired(waited);
    }
  }
}

}  // namespace mpitrain::detail
