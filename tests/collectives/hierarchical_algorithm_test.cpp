// The "hierarchical" allreduce (shm reduce-scatter in the node, allreduce across nodes, shm
// allgather): across nodes (2 nodes x 2 ranks; 3 x 2, where the ring runs between nodes; 2 x
// 1, where the two ranks exchange their whole buffers) every type and op against the closed
// forms at counts 0, 1, fewer than the ranks, odd, and spanning several inter-node chunks and
// several pipelined pieces, in place and out of place, bitwise identical on every rank; fp32
// data on a 16-bit wire. Elsewhere (one node; one rank per node on more than 2 nodes) it must
// decline with its reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "allreduce_check.hpp"
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

class HierarchicalTest : public ::testing::Test {
 protected:
  // True when the layout lets hierarchical run: several nodes of equal size, more than one
  // rank each or two nodes of one rank (DeclinesWithReason checks which layouts decline).
  bool runs() const {
    return comm_.cannot_run("hierarchical", Collective::allreduce, DType::f32, ReduceOp::sum)
        .empty();
  }

  void check(DType t, ReduceOp op, std::size_t count) {
    test::check_allreduce(comm_, "hierarchical", t, op, count);
  }

  std::vector<std::size_t> counts() const {
    const std::size_t n = static_cast<std::size_t>(comm_.size());
    return {0, 1, n - 1, n + 1, 1001};
  }

  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(HierarchicalTest, EveryTypeAndOpAcrossNodes) {
  if (!runs()) GTEST_SKIP() << "layout where hierarchical declines (see DeclinesWithReason)";
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : counts()) check(t, op, count);
    }
  }
}

TEST_F(HierarchicalTest, SeveralChunksAcrossNodes) {
  if (!runs()) GTEST_SKIP() << "layout where hierarchical declines (see DeclinesWithReason)";
  // 300001 f32: at 2 x 2, shards of 150001 elements, 10 chunks of 63 KiB between the nodes
  // (the last short), with a padded last shard.
  check(DType::f32, ReduceOp::sum, 300001);
  check(DType::bf16, ReduceOp::avg, 300001);
  // A per-call limit of 7 elements: 1001 elements go as shards of 501, 72 chunks, kept 32
  // deep.
  comm_.set_max_call_count(7);
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) check(t, op, 1001);
  }
}

TEST_F(HierarchicalTest, SeveralPipelinedPiecesAcrossNodes) {
  if (!runs()) GTEST_SKIP() << "layout where hierarchical declines (see DeclinesWithReason)";
  // Pieces of 4 MiB go through the three stages one after another at 2 nodes: 2621442 f32
  // (10 MiB, divisible by the local size: out of place, each shard is the rank's own block
  // of its piece in recv) are pieces of 4, 4 and 2 MiB; 2500003 f32 (not divisible: padded)
  // and 4194305 bf16 (8 MiB + 2 bytes: a last piece of one element per block, padded at 2 x
  // 2) end in short pieces.
  // Out of place and in place (check_allreduce runs both).
  check(DType::f32, ReduceOp::sum, 2621442);
  check(DType::f32, ReduceOp::max, 2500003);
  check(DType::bf16, ReduceOp::avg, 4194305);
}

TEST_F(HierarchicalTest, SeveralPipelinedPiecesInTheSharedSegment) {
  if (!runs()) GTEST_SKIP() << "layout where hierarchical declines (see DeclinesWithReason)";
  // The engine's case: buffers in the node's shared segment, where the shared-memory stages
  // read the peers' pieces in place (no copy in) while earlier pieces cross the link. 2621442
  // f32 (pieces of 4, 4 and 2 MiB), in place, then out of place from the segment into a
  // private buffer.
  constexpr std::size_t kCount = 2621442;
  const DType t = DType::f32;
  const Buffer in = inputs(t, comm_.rank(), kCount);
  const SharedBuffer buffer = comm_.allocate_shared(in.bytes.size());
  const std::span<std::byte> shared = buffer.bytes();
  std::copy(in.bytes.begin(), in.bytes.end(), shared.begin());
  comm_.allreduce(shared.data(), shared.data(), kCount, t, ReduceOp::sum, "hierarchical");
  Buffer got(kCount, t);
  std::copy(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(got.bytes.size()),
            got.bytes.begin());
  EXPECT_EQ(test::mismatches(got, ReduceOp::sum, comm_.size()), 0u);
  EXPECT_TRUE(test::identical_on_all_ranks(comm_, got.data(), got.bytes.size()));

  std::copy(in.bytes.begin(), in.bytes.end(), shared.begin());
  Buffer out(kCount, t);
  out.poison();
  comm_.allreduce(shared.data(), out.data(), kCount, t, ReduceOp::avg, "hierarchical");
  EXPECT_EQ(test::mismatches(out, ReduceOp::avg, comm_.size()), 0u);
}

TEST_F(HierarchicalTest, Fp32DataOnA16BitWire) {
  if (!runs()) GTEST_SKIP() << "layout where hierarchical declines (see DeclinesWithReason)";
  // Small integers and their sums are exact in bf16 and f16: the result is the wire type's
  // closed form (an average rounded to the wire type once, as n = 6 shows), widened.
  for (DType wire : {DType::bf16, DType::f16}) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : counts()) {
        SCOPED_TRACE(describe(wire, op, count));
        const Buffer in = inputs(DType::f32, comm_.rank(), count);
        Buffer data = in;
        comm_.allreduce(std::span<float>(static_cast<float*>(data.data()), count), op, wire,
                        "hierarchical");
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) {
          wrong += data[i] != test::expected(wire, op, comm_.size(), i);
        }
        EXPECT_EQ(wrong, 0u);
        EXPECT_TRUE(test::identical_on_all_ranks(comm_, data.data(), data.bytes.size()));
      }
    }
  }
}

TEST_F(HierarchicalTest, DeclinesWithReason) {
  const std::string why =
      comm_.cannot_run("hierarchical", Collective::allreduce, DType::f32, ReduceOp::sum);
  if (comm_.node_count() > 1 && (comm_.local_size() > 1 || comm_.node_count() == 2)) {
    EXPECT_EQ(why, "");  // (uneven nodes are not launched by the test layouts)
    // At 2 nodes of one rank each, the default takes it from 2 MiB.
    if (comm_.local_size() == 1) {
      EXPECT_EQ(comm_.default_allreduce_algorithm(std::size_t{2} << 20, DType::f32, ReduceOp::sum),
                "hierarchical");
    }
    return;
  }
  const std::string reason = comm_.node_count() == 1
                                 ? "the ranks are on one node"
                                 : "each node holds one rank and there are more than 2 nodes";
  EXPECT_NE(why.find("algorithm 'hierarchical' cannot run it: " + reason), std::string::npos)
      << why;
  std::vector<float> data(5, 1.0f);
  try {
    comm_.allreduce(data.data(), data.data(), data.size(), DType::f32, ReduceOp::sum,
                    "hierarchical");
    ADD_FAILURE() << "hierarchical ran on " << comm_.node_count() << " node(s) of "
                  << comm_.local_size() << " rank(s)";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  // The default never picks it here.
  EXPECT_NE(comm_.default_allreduce_algorithm(std::size_t{1} << 24, DType::f32, ReduceOp::sum),
            "hierarchical");
}

}  // namespace
}  // namespace mpitrain
