// wait_requests (see bounded_wait.hpp). Cost without a deadline: one MPI_Waitall. With one:
// one MPI_Testall per poll, a clock read every kPollsPerClockRead polls (~20 ns). The statuses
// (read only when a request failed) live on the stack up to kInlineStatuses requests, so a
// collective's wait allocates nothing.

#include "mpitrain/collectives/detail/bounded_wait.hpp"

#include <sched.h>

#include <array>
#include <span>
#include <vector>

namespace mpitrain::detail {
namespace {

// Tests before the waiter starts yielding its core between tests: a few microseconds.
constexpr int kBusyPolls = 64;
constexpr int kPollsPerClockRead = 16;
// Requests whose statuses fit on the stack (a collective waits on 1 or 2; a piece-split one
// on a few more).
constexpr int kInlineStatuses = 8;

// Returns `rc`, or for MPI_ERR_IN_STATUS the error of the first request that failed (e.g.
// MPI_ERR_TRUNCATE), which names the cause where MPI_ERR_IN_STATUS does not.
int first_error(int rc, std::span<const MPI_Status> statuses) {
  if (rc != MPI_ERR_IN_STATUS) return rc;
  for (const MPI_Status& s : statuses) {
    if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) return s.MPI_ERROR;
  }
  return rc;
}

}  // namespace

int wait_requests(MPI_Request* reqs, int n, std::chrono::nanoseconds timeout) {
  if (n == 0) return MPI_SUCCESS;
  std::array<MPI_Status, kInlineStatuses> inline_statuses;
  std::vector<MPI_Status> more;
  if (n > kInlineStatuses) more.resize(static_cast<std::size_t>(n));
  const std::span<MPI_Status> statuses(n > kInlineStatuses ? more.data() : inline_statuses.data(),
                                       static_cast<std::size_t>(n));
  if (timeout.count() <= 0) return first_error(MPI_Waitall(n, reqs, statuses.data()), statuses);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (long polls = 0;; ++polls) {
    int done = 0;
    const int rc = MPI_Testall(n, reqs, &done, statuses.data());
    if (rc != MPI_SUCCESS) return first_error(rc, statuses);
    if (done) return rc;
    if (polls < kBusyPolls) continue;
    sched_yield();
    if (polls % kPollsPerClockRead == 0) {
      const auto waited = Clock::now() - start;
      if (waited > timeout) throw WaitExpired(waited);
    }
  }
}

}  // namespace mpitrain::detail
