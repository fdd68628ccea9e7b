// GoogleTest main for every mpitrain test binary, single- or multi-rank.
//
// - Initialises MPI through MpiRuntime (a binary run without mpiexec is a world of one).
// - Rank 0 prints GoogleTest's usual output; other ranks print only their own failures,
//   prefixed with "[rank r]".
// - After every test, the ranks agree on the outcome: a test that failed on any rank is
//   failed on every rank, with a message naming the failing ranks, so the exit code and the
//   report of rank 0 never hide a failure elsewhere.
// - A failure never turns into a hang. A rank that failed or skipped a test (an ASSERT_*, an
//   exception or a GTEST_SKIP that left the test early) may have skipped collectives its peers
//   are now blocked in, so they never reach the end of the test. The agreement is therefore
//   nonblocking (each rank sends its outcome to every peer and polls for theirs): a rank whose
//   test failed or was skipped waits at most MPITRAIN_TEST_PEER_WAIT_S seconds (default 30),
//   then names the test, itself and the ranks that did not arrive on stderr and calls
//   MPI_Abort (exit code kAbortCode), which ends every rank. A rank whose test passed waits
//   longer (passing_wait_seconds: 10 times that, 300 s by default, at most kMaxPassingWaitS
//   unless the failing ranks' wait is longer still), so that a failing rank, which knows
//   why, normally reports first; but a peer that left a collective early WITHOUT failing
//   (a missing collective on a passing path) still ends the job with a message naming the
//   test and the missing ranks, instead of running into CTest's timeout silently. The bound
//   is on the gap between ranks finishing the same test, not on the test's length (the
//   slowest test binaries take about 13 s in all).
// - When every test that ran was skipped on every rank and none failed, rank 0 ends with the
//   line kAllSkippedMarker, which CTest's SKIP_REGULAR_EXPRESSION (cmake/MpitrainTesting.cmake)
//   turns into "Skipped". GoogleTest's own "[  SKIPPED ]" lines cannot serve: CTest marks a
//   test skipped when its output matches, whatever the exit code, so a binary with one skipped
//   test would hide its failures and its passes.
//
// The harness calls MPI directly (the one exception to "only collectives/ calls MPI"): it must
// stay trustworthy while the Communicator it tests is broken. It agrees on its own duplicate
// of MPI_COMM_WORLD, so that its collectives never match one a test makes on MPI_COMM_WORLD.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/collectives/mpi_runtime.hpp"

namespace {

// Exit code of a job the harness aborts because peers of a failed test did not arrive.
constexpr int kAbortCode = 3;
// Seconds a rank whose test failed or was skipped waits for its peers at the end of the test.
constexpr double kDefaultPeerWaitS = 30.0;
// A rank whose test passed waits this many times longer than one whose test failed.
constexpr double kPassingWaitFactor = 10.0;
// Seconds a passing rank waits at most (unless the failing ranks' wait is longer): below
// CTest's per-test TIMEOUT (MPITRAIN_TEST_TIMEOUT, 600 s by default, in
// cmake/MpitrainTesting.cmake), so that the harness's message, not CTest, ends a stuck job.
constexpr double kMaxPassingWaitS = 540.0;
// Tag of the outcome messages on the harness's own communicator.
constexpr int kOutcomeTag = 7001;
// The start of the line rank 0 prints when every test of the run was skipped and none failed.
constexpr const char* kAllSkippedMarker = "[  SKIPPED ] every test of this run was skipped";

// Returns the seconds a failing rank waits for its peers: MPITRAIN_TEST_PEER_WAIT_S when set
// to a positive number (at most 1e6 s, about 11 days, so that the deadline cannot overflow),
// kDefaultPeerWaitS otherwise (with a warning when set but unusable).
double peer_wait_seconds(int rank) {
  const char* text = std::getenv("MPITRAIN_TEST_PEER_WAIT_S");
  if (text == nullptr || *text == '\0') return kDefaultPeerWaitS;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (*end != '\0' || !(seconds > 0)) {
    std::fprintf(stderr,
                 "[rank %d] MPITRAIN_TEST_PEER_WAIT_S=\"%s\" is not a positive number of "
                 "seconds; using %g\n",
                 rank, text, kDefaultPeerWaitS);
    return kDefaultPeerWaitS;
  }
  return std::min(seconds, 1e6);
}

// Returns the seconds a passing rank waits for its peers: kPassingWaitFactor times the
// failing ranks' wait, at most kMaxPassingWaitS, and never less than the failing ranks' wait.
double passing_wait_seconds(double peer_wait_s) {
  return std::max(peer_wait_s, std::min(kPassingWaitFactor * peer_wait_s, kMaxPassingWaitS));
}

// The harness's own duplicate of MPI_COMM_WORLD, freed before MpiRuntime finalises MPI.
// Errors return (MPI_ERRORS_RETURN) so that the harness can report them.
class HarnessComm {
 public:
  HarnessComm() {
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm_) != MPI_SUCCESS) {
      comm_ = MPI_COMM_NULL;
      return;
    }
    if (MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN) != MPI_SUCCESS) {
      std::fprintf(stderr, "MPI_Comm_set_errhandler on the harness communicator failed\n");
    }
  }
  ~HarnessComm() {
    if (comm_ != MPI_COMM_NULL && MPI_Comm_free(&comm_) != MPI_SUCCESS) {
      std::fprintf(stderr, "MPI_Comm_free of the harness communicator failed\n");
    }
  }
  HarnessComm(const HarnessComm&) = delete;
  HarnessComm& operator=(const HarnessComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Prints the failed assertions of ranks other than 0, which have no default printer.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "unknown", result.line_number(),
                 result.message());
    std::fflush(stderr);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                   info.name());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
};

// Makes the ranks agree on each test's outcome. GoogleTest calls OnTestEnd in reverse order
// of registration and before it stops attributing results to the test, so a failure added
// here is part of the test and is printed by the default printer registered before us.
class AgreeOnOutcome : public ::testing::EmptyTestEventListener {
 public:
  AgreeOnOutcome(MPI_Comm comm, int rank, int size, double peer_wait_s)
      : comm_(comm),
        rank_(rank),
        size_(size),
        peer_wait_s_(peer_wait_s),
        passing_wait_s_(passing_wait_seconds(peer_wait_s)),
        all_(static_cast<std::size_t>(size), 0) {}
  void OnTestEnd(const ::testing::TestInfo& info) override {
    // failed_ and all_ are members: the sends read failed_ and the receives write all_ until
    // they complete, which may be after an early return below (after an MPI error).
    failed_ = info.result()->Failed() ? 1 : 0;
    const bool left_early = failed_ || info.result()->Skipped();
    // all_[r] is rank r's outcome; receives[r] and sends[r] are this rank's messages with r.
    // Messages between two ranks on one communicator and tag arrive in order, so the n-th
    // outcome received from a peer is its outcome of the n-th test.
    const auto n = static_cast<std::size_t>(size_);
    std::fill(all_.begin(), all_.end(), 0);
    all_[static_cast<std::size_t>(rank_)] = failed_;
    std::vector<MPI_Request> receives(n, MPI_REQUEST_NULL);
    std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto i = static_cast<std::size_t>(r);
      if (MPI_Irecv(&all_[i], 1, MPI_INT, r, kOutcomeTag, comm_, &receives[i]) != MPI_SUCCESS ||
          MPI_Isend(&failed_, 1, MPI_INT, r, kOutcomeTag, comm_, &sends[i]) != MPI_SUCCESS) {
        ADD_FAILURE() << "MPI_Irecv/MPI_Isend of test outcomes with rank " << r
                      << " failed on rank " << rank_;
        return;
      }
    }
    const int rc = wait_bounded(receives, sends, left_early ? peer_wait_s_ : passing_wait_s_, info);
    if (rc != MPI_SUCCESS) {
      ADD_FAILURE() << "waiting for the test outcomes of every rank failed on rank " << rank_;
      return;
    }
    std::string ranks;
    for (int r = 0; r < size_; ++r) {
      if (all_[static_cast<std::size_t>(r)] == 0) continue;
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(r);
    }
    if (!ranks.empty() && !failed_) {
      ADD_FAILURE() << "this test failed on rank(s) " << ranks << " of " << size_;
    }
  }

 private:
  // Returns MPI_SUCCESS once every request has completed, or the first error code of
  // MPI_Test. If the receives have not all completed after wait_s seconds, names the test
  // and the ranks whose outcome did not arrive on stderr and aborts the job: does not
  // return. Polls every millisecond (the sleep only keeps this rank from taking a core its
  // peers may need; it synchronises nothing).
  int wait_bounded(std::vector<MPI_Request>& receives, std::vector<MPI_Request>& sends,
                   double wait_s, const ::testing::TestInfo& info) const {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(wait_s));
    for (;;) {
      bool pending = false;
      for (std::vector<MPI_Request>* requests : {&receives, &sends}) {
        for (MPI_Request& request : *requests) {
          if (request == MPI_REQUEST_NULL) continue;
          int done = 0;
          const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
          if (rc != MPI_SUCCESS) return rc;
          pending = pending || !done;
        }
      }
      if (!pending) return MPI_SUCCESS;
      const bool receives_done = std::all_of(receives.begin(), receives.end(),
                                             [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
      // Once every peer's outcome is here, every peer has posted its receive from this rank,
      // so the sends complete without waiting for anyone: no deadline for them.
      if (!receives_done && Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::string missing;
    for (int r = 0; r < size_; ++r) {
      if (receives[static_cast<std::size_t>(r)] == MPI_REQUEST_NULL) continue;
      if (!missing.empty()) missing += ',';
      missing += std::to_string(r);
    }
    if (info.result()->Failed() || info.result()->Skipped()) {
      const char* outcome = info.result()->Failed() ? "failed" : "was skipped";
      std::fprintf(stderr,
                   "[rank %d] %s.%s %s on rank %d, and the other ranks did not reach the end "
                   "of the test within %g s (rank(s) %s did not arrive, probably stuck in a "
                   "collective rank %d left early); aborting the job with exit code %d "
                   "(MPITRAIN_TEST_PEER_WAIT_S sets the wait)\n",
                   rank_, info.test_suite_name(), info.name(), outcome, rank_, wait_s,
                   missing.c_str(), rank_, kAbortCode);
    } else {
      std::fprintf(stderr,
                   "[rank %d] %s.%s passed on rank %d, but rank(s) %s did not reach the end of "
                   "the test within %g s (probably stuck in a collective that another rank "
                   "left early without failing, or in a deadlock); aborting the job with exit "
                   "code %d (the wait is %g x MPITRAIN_TEST_PEER_WAIT_S, at most %g s)\n",
                   rank_, info.test_suite_name(), info.name(), rank_, missing.c_str(), wait_s,
                   kAbortCode, kPassingWaitFactor, kMaxPassingWaitS);
    }
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, kAbortCode);
    std::abort();  // MPI_Abort does not return; if it did, the job must still end
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  double peer_wait_s_;
  double passing_wait_s_;
  std::vector<int> all_;
  int failed_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  mpitrain::MpiRuntime runtime(&argc, &argv);
  const int rank = runtime.world_rank();
  const int size = runtime.world_size();
  const HarnessComm harness;
  if (harness.get() == MPI_COMM_NULL) {
    std::fprintf(stderr, "[rank %d] MPI_Comm_dup of MPI_COMM_WORLD for the harness failed\n",
                 rank);
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);

  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new AgreeOnOutcome(harness.get(), rank, size, peer_wait_seconds(rank)));

  const int result = RUN_ALL_TESTS();
  // {exit code, tests passed, tests skipped} of this rank, maximum over the ranks.
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int local[3] = {result, unit.successful_test_count(), unit.skipped_test_count()};
  int global[3] = {0, 0, 0};
  if (MPI_Allreduce(local, global, 3, MPI_INT, MPI_MAX, harness.get()) != MPI_SUCCESS) {
    std::fprintf(stderr, "[rank %d] MPI_Allreduce of the final result failed\n", rank);
    return 1;
  }
  if (rank == 0 && global[0] == 0 && global[1] == 0 && global[2] > 0) {
    std::printf("%s (%d on rank 0), none passed or failed\n", kAllSkippedMarker,
                unit.skipped_test_count());
    std::fflush(stdout);
  }
  return global[0];
}
