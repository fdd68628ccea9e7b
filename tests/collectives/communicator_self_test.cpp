// Communicator::self: a communicator over this process alone, at every world size (1-4):
// size 1, rank 0, one node; every collective returns this process's own values (the closed
// form of one rank); and it is independent of the world: only some ranks make one, the ranks
// issue different numbers of collectives on it, and the world communicator neither waits for
// nor counts them.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collective_values.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

using test::Buffer;
using test::describe;
using test::inputs;
using test::kAllOps;
using test::kAllTypes;
using test::mismatches;
using test::value;

class CommunicatorSelfTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;  // adopts the MPI of the test main
  Communicator world_{runtime_};
};

TEST_F(CommunicatorSelfTest, SizeOneRankZeroOneNode) {
  const Communicator self = Communicator::self(runtime_);
  EXPECT_EQ(self.size(), 1);
  EXPECT_EQ(self.rank(), 0);
  EXPECT_EQ(self.local_size(), 1);
  EXPECT_EQ(self.local_rank(), 0);
  EXPECT_EQ(self.node_count(), 1);
  EXPECT_EQ(self.node_index(), 0);
  EXPECT_EQ(self.collectives_issued(), 0u);
  // The world is what it was.
  EXPECT_EQ(world_.size(), runtime_.world_size());
  EXPECT_EQ(world_.rank(), runtime_.world_rank());
}

TEST_F(CommunicatorSelfTest, CollectivesReturnThisProcesssValues) {
  const Communicator self = Communicator::self(runtime_);
  // Each world rank feeds its own world rank's inputs: the results must be those values,
  // reduced over one rank, whatever the other processes hold.
  const int me = runtime_.world_rank();
  for (std::string_view algo : algorithm_names(Collective::allreduce)) {
    // hierarchical combines nodes: on one rank it declines, with its reason.
    if (algo == "hierarchical") {
      EXPECT_NE(self.cannot_run(algo, Collective::allreduce, DType::f32, ReduceOp::sum), "");
      continue;
    }
    for (DType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
          SCOPED_TRACE(describe(t, op, count) + " " + std::string(algo));
          Buffer b = inputs(t, me, count);
          Buffer out(count, t);
          out.poison();
          self.allreduce(b.data(), out.data(), count, t, op, algo);
          // value(t, me, i) is value(t, 0, i + 3 me): the one-rank closed form, shifted.
          EXPECT_EQ(mismatches(out, op, 1, 3 * static_cast<std::size_t>(me)), 0u);
          EXPECT_EQ(out.bytes, b.bytes);
        }
      }
    }
  }
  // fp32 values with a 16-bit wire: the values rounded to the wire type (small integers: exact).
  for (DType wire : {DType::f32, DType::bf16, DType::f16}) {
    Buffer b = inputs(DType::f32, me, 777);
    std::vector<float> data(777);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(b[i]);
    self.allreduce(std::span<float>(data), ReduceOp::sum, wire);
    for (std::size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], static_cast<float>(value(DType::f32, me, i))) << to_string(wire) << " at " << i;
    }
  }
  {
    std::vector<double> x{1.5, -2.0, 3.25};
    self.broadcast(std::span<double>(x), 0);
    EXPECT_EQ(x, (std::vector<double>{1.5, -2.0, 3.25}));
  }
  {
    const std::vector<std::int32_t> send{me, 7, -me};
    std::vector<std::int32_t> recv(3, -99);
    self.reduce_scatter(std::span<const std::int32_t>(send), std::span<std::int32_t>(recv),
                        ReduceOp::sum);
    EXPECT_EQ(recv, send);
    self.allgather(std::span<const std::int32_t>(send), std::span<std::int32_t>(recv));
    EXPECT_EQ(recv, send);
    self.gather(std::span<const std::int32_t>(send), std::span<std::int32_t>(recv), 0);
    EXPECT_EQ(recv, send);
    const std::vector<std::size_t> counts{3};
    std::fill(recv.begin(), recv.end(), -99);
    self.allgatherv(std::span<const std::int32_t>(send), std::span<std::int32_t>(recv), counts);
    EXPECT_EQ(recv, send);
  }
  EXPECT_EQ(self.allreduce_value(me + 10, ReduceOp::sum), me + 10);
  EXPECT_EQ(self.allgather_value(me), std::vector<int>{me});
  // Nonblocking forms complete by themselves: no other process takes part.
  Buffer nb = inputs(DType::f32, me, 1001);
  self.iallreduce(nb.data(), nb.data(), 1001, DType::f32, ReduceOp::avg).wait();
  EXPECT_EQ(mismatches(nb, ReduceOp::avg, 1, 3 * static_cast<std::size_t>(me)), 0u);
  self.ibarrier().wait();
  self.barrier();
}

TEST_F(CommunicatorSelfTest, IndependentOfTheWorld) {
  const int me = runtime_.world_rank();
  const std::uint64_t world_before = world_.collectives_issued();
  // Only even world ranks make one (construction is not collective over the world), and
  // world rank r issues 3 r + 2 collectives on it while the others issue a different number:
  // if any of them involved another process, the counts would not match and the job would
  // hang or fail here instead of reaching the world's checks below.
  std::uint64_t issued = 0;
  if (me % 2 == 0) {
    const Communicator self = Communicator::self(runtime_);
    const int rounds = 3 * me + 2;
    float acc = 0.0f;
    for (int k = 0; k < rounds; ++k) {
      float x = static_cast<float>(me + k);
      self.allreduce(&x, &x, 1, DType::f32, ReduceOp::sum);
      acc += x;
    }
    // sum over k < rounds of (me + k)
    EXPECT_EQ(acc, static_cast<float>(rounds * me + rounds * (rounds - 1) / 2));
    issued = self.collectives_issued();
    EXPECT_EQ(issued, static_cast<std::uint64_t>(rounds));
  }
  // Two self communicators of one process are distinct duplicates: each counts its own.
  const Communicator a = Communicator::self(runtime_);
  const Communicator b = Communicator::self(runtime_);
  a.barrier();
  EXPECT_EQ(a.collectives_issued(), 1u);
  EXPECT_EQ(b.collectives_issued(), 0u);
  // The world communicator counted none of them and still reduces over every rank.
  EXPECT_EQ(world_.collectives_issued(), world_before);
  EXPECT_EQ(world_.allreduce_value(1, ReduceOp::sum), world_.size());
  const std::vector<std::int64_t> all =
      world_.allgather_value(static_cast<std::int64_t>(issued));
  for (int r = 0; r < world_.size(); ++r) {
    EXPECT_EQ(all[static_cast<std::size_t>(r)], r % 2 == 0 ? 3 * r + 2 : 0) << "world rank " << r;
  }
}

}  // namespace
}  // namespace mpitrain
