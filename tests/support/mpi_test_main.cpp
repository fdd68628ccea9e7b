// GoogleTest main for every mpitrain test binary, single- or multi-rank.
//
// - Initialises MPI through MpiRuntime (a binary run without mpiexec is a world of one).
// - Rank 0 prints GoogleTest's usual output; other ranks print only their own failures,
//   prefixed with "[rank r]".
// - After every test, the ranks agree on the outcome: a test that failed on any rank is
//   failed on every rank, with a message naming the failing ranks, so the exit code and the
//   report of rank 0 never hide a failure elsewhere.
//
// The harness calls MPI directly on MPI_COMM_WORLD (the one exception to "only collectives/
// calls MPI"): it must stay trustworthy while the Communicator it tests is broken.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpitrain/collectives/mpi_runtime.hpp"

namespace {

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
  AgreeOnOutcome(int rank, int size) : rank_(rank), size_(size) {}
  void OnTestEnd(const ::testing::TestInfo& info) override {
    int failed = info.result()->Failed() ? 1 : 0;
    std::vector<int> all(static_cast<std::size_t>(size_), 0);
    if (MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD) !=
        MPI_SUCCESS) {
      ADD_FAILURE() << "MPI_Allgather of test outcomes failed on rank " << rank_;
      return;
    }
    std::string ranks;
    for (int r = 0; r < size_; ++r) {
      if (all[static_cast<std::size_t>(r)] == 0) continue;
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(r);
    }
    if (!ranks.empty() && !failed) {
      ADD_FAILURE() << "this test failed on rank(s) " << ranks << " of " << size_;
    }
  }

 private:
  int rank_;
  int size_;
};

}  // namespace

int main(int argc, char** argv) {
  mpitrain::MpiRuntime runtime(&argc, &argv);
  const int rank = runtime.world_rank();
  const int size = runtime.world_size();
  ::testing::InitGoogleTest(&argc, argv);

  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new AgreeOnOutcome(rank, size));

  const int local = RUN_ALL_TESTS();
  int global = 0;
  if (MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) {
    std::fprintf(stderr, "[rank %d] MPI_Allreduce of the final result failed\n", rank);
    return 1;
  }
  return global;
}
