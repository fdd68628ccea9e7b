// The "reduce_bcast" allreduce (MPI_Reduce to rank 0, then MPI_Bcast): every type and op, in
// place and out of place, counts around the world size and across the per-call limit, bitwise
// identical on every rank; its nonblocking form is refused before anything is posted.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "allreduce_check.hpp"
#include "collective_values.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

using test::kAllOps;
using test::kAllTypes;

class ReduceBroadcastTest : public ::testing::Test {
 protected:
  void check(DType t, ReduceOp op, std::size_t count) {
    test::check_allreduce(comm_, "reduce_bcast", t, op, count);
  }

  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(ReduceBroadcastTest, EveryTypeAndOp) {
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, n - 1, n + 1, std::size_t{1001}}) {
        check(t, op, count);
      }
    }
  }
}

TEST_F(ReduceBroadcastTest, PiecesAboveThePerCallLimit) {
  comm_.set_max_call_count(7);  // 100 elements go as 15 pieces
  for (DType t : {DType::f32, DType::bf16, DType::i64}) {
    for (ReduceOp op : kAllOps) check(t, op, 100);
  }
}

TEST_F(ReduceBroadcastTest, ListedAndDefaultNeverPicksIt) {
  EXPECT_NO_THROW(require_algorithm(Collective::allreduce, "reduce_bcast"));
  EXPECT_EQ(comm_.cannot_run("reduce_bcast", Collective::allreduce, DType::bf16, ReduceOp::avg),
            "");
  for (DType t : kAllTypes) {
    EXPECT_NE(comm_.default_allreduce_algorithm(std::size_t{1} << 20, t, ReduceOp::sum),
              "reduce_bcast");
  }
  // Blocking only: the nonblocking form is refused on every rank, naming why.
  const std::uint64_t issued = comm_.collectives_issued();
  float x = 1.0f;
  try {
    comm_.iallreduce(&x, &x, 1, DType::f32, ReduceOp::sum, "reduce_bcast");
    FAIL() << "iallreduce accepted reduce_bcast";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("iallreduce on rank " + std::to_string(comm_.rank())),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no nonblocking form"), std::string::npos) << e.what();
  }
  EXPECT_EQ(comm_.collectives_issued(), issued);
  // It runs allreduce only.
  EXPECT_THROW(require_algorithm(Collective::allgather, "reduce_bcast"), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain
