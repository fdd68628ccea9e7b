// Deadline options, call sites, the fingerprint check and the debug mode of a Communicator
// (collective_timeout.hpp), at 1 to 4 ranks. How a job ends on a timeout is checked by
// deadline_test.py (it ends the job).

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/collectives/collective_timeout.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

class CollectiveWatchTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  int last() const { return comm_.size() - 1; }
};

// Returns the message of the CollectiveMismatch `fn` throws ("" when it throws none).
template <class Fn> std::string mismatch_of(Fn&& fn) {
  try {
    fn();
  } catch (const CollectiveMismatch& e) {
    return e.what();
  }
  return "";
}

TEST(TimeoutAction, NamesRoundTrip) {
  EXPECT_EQ(to_string(TimeoutAction::abort), "abort");
  EXPECT_EQ(to_string(TimeoutAction::throw_error), "throw");
  EXPECT_EQ(parse_timeout_action("throw"), TimeoutAction::throw_error);
  EXPECT_EQ(parse_timeout_action("abort"), TimeoutAction::abort);
  try {
    parse_timeout_action("exit");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown timeout action 'exit' (valid: abort, throw)");
  }
}

TEST_F(CollectiveWatchTest, OptionsDefaultToNoDeadlineAbortAndNoDebug) {
  EXPECT_EQ(comm_.timeout(), std::chrono::nanoseconds{0});
  EXPECT_EQ(comm_.timeout_action(), TimeoutAction::abort);
  comm_.set_timeout(std::chrono::seconds(5));
  comm_.set_timeout_action(TimeoutAction::throw_error);
  EXPECT_EQ(comm_.timeout(), std::chrono::seconds(5));
  EXPECT_EQ(comm_.timeout_action(), TimeoutAction::throw_error);
  EXPECT_FALSE(comm_.waiting_for_peers());
}

// With a deadline, every collective still gives the results of before (the bounded waits
// post the nonblocking forms).
TEST_F(CollectiveWatchTest, CollectivesWithADeadlineGiveTheSameResults) {
  comm_.set_timeout(std::chrono::seconds(60));
  const float n = static_cast<float>(comm_.size());
  for (const char* algo : {"default", "mpi", "ring", "reduce_bcast"}) {
    if (!comm_.cannot_run(algo, Collective::allreduce, DType::f32).empty()) continue;
    std::vector<float> data(1000, 1.0f);
    comm_.allreduce(std::span<float>(data), ReduceOp::sum, algo);
    EXPECT_EQ(data.front(), n) << algo;
    EXPECT_EQ(data.back(), n) << algo;
  }
  std::vector<int> all = comm_.allgather_value(comm_.rank());
  for (int r = 0; r < comm_.size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], r);
  Request request = comm_.ibarrier();
  request.wait();
  comm_.barrier();
}

TEST_F(CollectiveWatchTest, MatchingCollectivesPassTheCheckWaitingOrPosted) {
  for (const bool wait : {true, false, false, true}) {
    std::vector<double> data(10, 1.0);
    comm_.allreduce(std::span<double>(data), ReduceOp::sum);
    comm_.barrier();
    EXPECT_EQ(mismatch_of([&] { comm_.check_collectives(wait); }), "");
  }
}

// Rank size-1 reduces with max where the others sum: MPI completes it without a word; the
// check names every rank's count, and the fingerprints single out the odd rank.
TEST_F(CollectiveWatchTest, ADifferentReductionFailsTheCheckOnEveryRank) {
  comm_.check_collectives();
  std::vector<float> data(16, 1.0f);
  comm_.allreduce(std::span<float>(data), comm_.rank() == last() && last() > 0 ? ReduceOp::max
                                                                               : ReduceOp::sum);
  const std::string what = mismatch_of([&] { comm_.check_collectives(); });
  if (comm_.size() == 1) {
    EXPECT_EQ(what, "");
    return;
  }
  const std::string head =
      "collective mismatch: the ranks issued different collectives since the last check: rank 0 "
      "issued 1 up to #1 (fingerprint ";
  EXPECT_EQ(what.rfind(head, 0), 0u) << what;
  EXPECT_NE(what.find("rank " + std::to_string(last()) + " issued 1 up to #1 (fingerprint "),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("; set MPITRAIN_DEBUG_COLLECTIVES=1 to name the first collective that "
                      "differs"),
            std::string::npos)
      << what;
}

// Posted: the mismatch surfaces at the next call.
TEST_F(CollectiveWatchTest, APostedCheckReportsAtTheNextCheck) {
  comm_.check_collectives();
  std::vector<float> data(16, 1.0f);
  comm_.allreduce(std::span<float>(data), comm_.rank() == last() && last() > 0 ? ReduceOp::min
                                                                               : ReduceOp::sum);
  EXPECT_EQ(mismatch_of([&] { comm_.check_collectives(false); }), "");
  const std::string what = mismatch_of([&] { comm_.check_collectives(false); });
  EXPECT_EQ(what.empty(), comm_.size() == 1) << what;
  comm_.check_collectives();  // the one posted by the last call matches (nothing in between)
}

TEST_F(CollectiveWatchTest, DebugModeNamesTheFirstMismatchAndTheCallSites) {
  comm_.set_debug_collectives(true);
  EXPECT_TRUE(comm_.debug_collectives());
  std::vector<float> data(1024, 1.0f);
  {
    const Communicator::CallSite site(comm_, "the first loop");
    comm_.allreduce(std::span<float>(data), ReduceOp::sum);  // #1, the same everywhere
  }
  const std::string what = mismatch_of([&] {
    if (comm_.rank() == last()) {
      const Communicator::CallSite site(comm_, "Engine::backward");
      comm_.allreduce(std::span<float>(data), ReduceOp::sum);
    } else {
      const Communicator::CallSite site(comm_, "wait_for_everyone");
      comm_.barrier();
    }
  });
  comm_.set_debug_collectives(false);
  if (comm_.size() == 1) {
    EXPECT_EQ(what, "");
    return;
  }
  EXPECT_EQ(what, "collective mismatch: rank " + std::to_string(last()) +
                      " called allreduce(f32, 1024) #2 from Engine::backward, rank 0 called "
                      "barrier #2 from wait_for_everyone");
}

TEST_F(CollectiveWatchTest, DebugModeTellsCallsApartByReductionAndUnnamedSites) {
  comm_.set_debug_collectives(true);
  std::vector<float> data(8, 1.0f);
  const std::string what = mismatch_of([&] {
    comm_.allreduce(std::span<float>(data), comm_.rank() == last() ? ReduceOp::max : ReduceOp::sum,
                    "mpi");
  });
  comm_.set_debug_collectives(false);
  if (comm_.size() == 1) {
    EXPECT_EQ(what, "");
    return;
  }
  EXPECT_EQ(what, "collective mismatch: rank " + std::to_string(last()) +
                      " called allreduce(f32, 8, max, mpi) #1 from an unnamed call site, rank 0 "
                      "called allreduce(f32, 8, sum, mpi) #1 from an unnamed call site");
}

}  // namespace
}  // namespace mpitrain
