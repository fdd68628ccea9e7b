// measure_core_latency and Communicator::core_latency_ns: ranks 0 and 1 of a node pass the
// probe word a known number of times (its final value is known in closed form), only rank 0
// gets a time, every call starts from 0 whatever an earlier one left, a peer that never
// comes is not waited for past the timeout, and the public form gives every rank the same
// answer, none at one rank.

#include "mpitrain/collectives/detail/core_latency.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/detail/bounded_wait.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "shm_test_support.hpp"

namespace mpitrain {
namespace {

using detail::ShmSegment;

TEST(CoreLatency, RankZeroTimesTheRoundTripsAndTheWordCountsThem) {
  test::NodeComm node;
  ShmSegment seg(node.get());
  constexpr int kRoundTrips = 300;
  constexpr int kWarmup = 20;
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE(call);
    // What an interrupted measurement may leave (an odd value), before the second call.
    if (call == 2 && node.rank() == 0) seg.probe_word().store(12345);
    detail::reset_probe(seg);
    MPI_Barrier(node.get());
    const auto one_way = detail::measure_core_latency(seg, kRoundTrips, kWarmup);
    MPI_Barrier(node.get());
    if (node.size() == 1 || node.rank() > 0) {
      EXPECT_FALSE(one_way.has_value());
    } else {
      ASSERT_TRUE(one_way.has_value());
      EXPECT_GT(one_way->count(), 0.0);
      EXPECT_TRUE(std::isfinite(one_way->count()));
    }
    // Each round trip moves the word twice, from 0; nobody moves it at one rank.
    const std::uint64_t moves =
        node.size() == 1 ? 0 : 2 * static_cast<std::uint64_t>(kRoundTrips + kWarmup);
    EXPECT_EQ(seg.probe_word().load(), moves);
    MPI_Barrier(node.get());  // every rank read it before rank 0 writes it again
  }
}

TEST(CoreLatency, NothingToTimeWithoutRoundTrips) {
  test::NodeComm node;
  ShmSegment seg(node.get());
  MPI_Barrier(node.get());
  EXPECT_FALSE(detail::measure_core_latency(seg, 0, 0).has_value());
  EXPECT_EQ(seg.probe_word().load(), 0u);
}

TEST(CoreLatency, RankZeroGivesUpAfterTheTimeoutWhenItsPeerNeverComes) {
  test::NodeComm node;
  ShmSegment seg(node.get());
  seg.set_timeout(std::chrono::milliseconds(50));
  MPI_Barrier(node.get());
  if (node.size() > 1 && node.rank() == 0) {
    try {
      detail::measure_core_latency(seg, 10, 0);
      ADD_FAILURE() << "rank 0 passed the word without rank 1";
    } catch (const detail::WaitExpired& e) {
      EXPECT_GE(e.waited(), std::chrono::milliseconds(50));
    }
  }
  MPI_Barrier(node.get());  // rank 1 stays out until rank 0 has given up
}

TEST(CoreLatency, TheCommunicatorGivesEveryRankTheSameAnswer) {
  MpiRuntime runtime;  // adopts the MPI of the test main
  Communicator comm(runtime);
  for (int call = 0; call < 2; ++call) {
    const std::optional<double> ns = comm.core_latency_ns();
    // An answer wherever some node has two ranks (the largest over the nodes).
    ASSERT_EQ(ns.has_value(), comm.allreduce_value(comm.local_size(), ReduceOp::max) > 1);
    const double mine = ns.value_or(-1.0);
    EXPECT_EQ(comm.allreduce_value(mine, ReduceOp::max), mine);
    EXPECT_EQ(comm.allreduce_value(mine, ReduceOp::min), mine);
    if (ns) {
      EXPECT_GT(*ns, 0.0);
    }
  }
}

}  // namespace
}  // namespace mpitrain
