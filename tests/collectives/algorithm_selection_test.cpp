// AlgorithmSelection: rule matching (types, ops, wire, ranks, byte bounds scaled per peer), the
// first rule wins, rules whose algorithm cannot run the call are passed over, and "mpi" is
// the fallback. Single-process: no communicator involved.

#include <gtest/gtest.h>

#include <string_view>

#include "mpitrain/collectives/algorithm_selection.hpp"
#include "mpitrain/collectives/collective.hpp"

namespace mpitrain {
namespace {

SelectionQuery query(DType type, ReduceOp op, std::size_t bytes, int ranks, bool wire = false) {
  SelectionQuery q;
  q.type = type;
  q.reduce = op;
  q.bytes = bytes;
  q.ranks = ranks;
  q.wire = wire;
  return q;
}

const auto any_algorithm = [](std::string_view) { return true; };

TEST(AlgorithmSelection, RuleBoundsScalePerPeer) {
  SelectionRule r;
  r.types = dtype_set({DType::bf16});
  r.reduces = reduce_op_set({ReduceOp::sum});
  r.min_bytes = 1000;
  r.end_bytes = 2000;
  r.bytes_per_peer = true;
  r.algorithm = "ring";
  EXPECT_TRUE(r.matches(query(DType::bf16, ReduceOp::sum, 1000, 2)));
  EXPECT_FALSE(r.matches(query(DType::bf16, ReduceOp::sum, 999, 2)));
  EXPECT_FALSE(r.matches(query(DType::bf16, ReduceOp::sum, 2000, 2)));
  EXPECT_FALSE(r.matches(query(DType::bf16, ReduceOp::sum, 1999, 3)));  // [2000, 4000) at 3
  EXPECT_TRUE(r.matches(query(DType::bf16, ReduceOp::sum, 3999, 3)));
  EXPECT_FALSE(r.matches(query(DType::f16, ReduceOp::sum, 1500, 2)));
  EXPECT_FALSE(r.matches(query(DType::bf16, ReduceOp::avg, 1500, 2)));
  r.wire = SelectionRule::Wire::yes;
  EXPECT_FALSE(r.matches(query(DType::bf16, ReduceOp::sum, 1500, 2)));
  EXPECT_TRUE(r.matches(query(DType::bf16, ReduceOp::sum, 1500, 2, true)));
}

TEST(AlgorithmSelection, FirstRuleThatCanRunWinsElseMpi) {
  SelectionRule a;
  a.algorithm = "ring";
  a.min_ranks = 2;
  SelectionRule b;
  b.algorithm = "reduce_bcast";
  const AlgorithmSelection sel({a, b});
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 64, 2), any_algorithm), "ring");
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 64, 1), any_algorithm), "reduce_bcast");
  const auto no_ring = [](std::string_view name) { return name != "ring"; };
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 64, 2), no_ring), "reduce_bcast");
  const auto none = [](std::string_view) { return false; };
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 64, 2), none), "mpi");
  SelectionQuery gather = query(DType::f32, ReduceOp::sum, 64, 2);
  gather.op = Collective::allgather;
  EXPECT_EQ(AlgorithmSelection({}).choose(gather, any_algorithm), "mpi");
}

TEST(AlgorithmSelection, BuiltinTable) {
  const AlgorithmSelection sel = AlgorithmSelection::builtin();
  const auto across = [](SelectionQuery q) {  // 2 nodes, 1 rank each
    q.nodes = 2;
    return q;
  };
  // Across nodes (shm declines there): at 2 nodes of 1 rank, hierarchical (its pairwise
  // exchange) from 2 MiB for every type and op; below, and for a 16-bit wire, MPI for native
  // types, the ring for 16-bit ones from 16 KiB (2 KiB for averages) times size() - 1.
  const auto choose = [&](SelectionQuery q) { return sel.choose(across(q), any_algorithm); };
  EXPECT_EQ(choose(query(DType::f32, ReduceOp::sum, 64u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::f32, ReduceOp::sum, 2u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::f32, ReduceOp::sum, (2u << 20) - 4, 2)), "mpi");
  EXPECT_EQ(choose(query(DType::f64, ReduceOp::max, 4u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::sum, 16u << 10, 2)), "ring");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::sum, 4u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::max, 64u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::avg, 64u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::f16, ReduceOp::sum, 8u << 20, 2)), "hierarchical");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::sum, 64u << 20, 2, true)), "ring");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::sum, 64u << 20, 3)), "ring");
  // Where hierarchical cannot run (the nonblocking form): MPI for bf16 sums, maxima and
  // minima from 2 MiB at 2 ranks (measured across 2 nodes from 8 MiB), MPI for f32.
  const auto no_hier = [](std::string_view name) { return name != "hierarchical"; };
  EXPECT_EQ(sel.choose(across(query(DType::f32, ReduceOp::sum, 64u << 20, 2)), no_hier), "mpi");
  EXPECT_EQ(sel.choose(across(query(DType::bf16, ReduceOp::sum, 4u << 20, 2)), no_hier), "mpi");
  EXPECT_EQ(sel.choose(across(query(DType::bf16, ReduceOp::max, 64u << 20, 2)), no_hier), "mpi");
  EXPECT_EQ(sel.choose(across(query(DType::bf16, ReduceOp::sum, (8u << 20) - 2, 2)), no_hier),
            "mpi");
  EXPECT_EQ(sel.choose(across(query(DType::bf16, ReduceOp::sum, 8u << 20, 2)), no_hier), "mpi");
  EXPECT_EQ(sel.choose(across(query(DType::bf16, ReduceOp::avg, 64u << 20, 2)), no_hier), "ring");
  // On one node without shm, the ring above the band (measured there).
  const auto no_shm_one_node = [](std::string_view name) { return name != "shm"; };
  EXPECT_EQ(sel.choose(query(DType::bf16, ReduceOp::sum, 64u << 20, 2), no_shm_one_node), "ring");
  EXPECT_EQ(choose(query(DType::bf16, ReduceOp::sum, 4u << 20, 2, true)), "ring");
  EXPECT_EQ(choose(query(DType::f16, ReduceOp::avg, 2u << 10, 2)), "ring");
  EXPECT_EQ(choose(query(DType::f16, ReduceOp::avg, 4u << 10, 3)), "ring");
  EXPECT_EQ(choose(query(DType::f16, ReduceOp::avg, (4u << 10) - 1, 3)), "mpi");
  EXPECT_EQ(sel.choose(query(DType::bf16, ReduceOp::sum, 1u << 30, 1), any_algorithm), "mpi");
  // 2 nodes x 2 ranks: hierarchical for the native types in [8 KiB, 64 KiB) and from 256 KiB,
  // MPI between, and for bf16 from 256 KiB; f16 and wires
  // keep the rules above; at one rank per node below 2 MiB, MPI.
  const auto two_by_two = [](SelectionQuery q) {
    q.nodes = 2;
    q.local_ranks = 2;
    return q;
  };
  const auto choose22 = [&](SelectionQuery q) { return sel.choose(two_by_two(q), any_algorithm); };
  EXPECT_EQ(choose22(query(DType::f32, ReduceOp::sum, (8u << 10) - 1, 4)), "mpi");
  EXPECT_EQ(choose22(query(DType::f32, ReduceOp::sum, 8u << 10, 4)), "hierarchical");
  EXPECT_EQ(choose22(query(DType::f32, ReduceOp::sum, 64u << 10, 4)), "mpi");
  EXPECT_EQ(choose22(query(DType::f32, ReduceOp::sum, (256u << 10) - 1, 4)), "mpi");
  EXPECT_EQ(choose22(query(DType::f32, ReduceOp::sum, 256u << 10, 4)), "hierarchical");
  EXPECT_EQ(choose22(query(DType::f64, ReduceOp::avg, 64u << 20, 4)), "hierarchical");
  EXPECT_EQ(choose22(query(DType::i32, ReduceOp::max, 1u << 20, 4)), "hierarchical");
  EXPECT_EQ(choose22(query(DType::bf16, ReduceOp::sum, 4u << 20, 4)), "hierarchical");
  EXPECT_EQ(choose22(query(DType::bf16, ReduceOp::avg, 256u << 10, 4)), "hierarchical");
  EXPECT_EQ(choose22(query(DType::bf16, ReduceOp::sum, (256u << 10) - 2, 4)), "ring");
  EXPECT_EQ(choose22(query(DType::f16, ReduceOp::sum, 4u << 20, 4)), "ring");
  EXPECT_EQ(choose22(query(DType::bf16, ReduceOp::sum, 4u << 20, 4, true)), "ring");
  EXPECT_EQ(choose(query(DType::f32, ReduceOp::sum, 1u << 20, 2)), "mpi");  // 1 rank per node
  const auto no_hierarchical = [](std::string_view name) { return name != "hierarchical"; };
  EXPECT_EQ(sel.choose(two_by_two(query(DType::f32, ReduceOp::sum, 1u << 20, 4)), no_hierarchical),
            "mpi");
  // One node: shared memory at every size and type; fp32 data on a 16-bit wire keeps the ring.
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 32u << 10, 2), any_algorithm), "shm");
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 1u << 20, 2), any_algorithm), "shm");
  EXPECT_EQ(sel.choose(query(DType::f64, ReduceOp::max, 1u << 30, 3), any_algorithm), "shm");
  EXPECT_EQ(sel.choose(query(DType::bf16, ReduceOp::sum, 8u << 10, 4), any_algorithm), "shm");
  EXPECT_EQ(sel.choose(query(DType::bf16, ReduceOp::sum, 1u << 10, 2), any_algorithm), "shm");
  EXPECT_EQ(sel.choose(query(DType::f16, ReduceOp::avg, 64u << 20, 2), any_algorithm), "shm");
  EXPECT_EQ(sel.choose(query(DType::bf16, ReduceOp::sum, 4u << 20, 2, true), any_algorithm),
            "ring");
  SelectionQuery rs = query(DType::f32, ReduceOp::sum, 4u << 20, 2);
  rs.op = Collective::reduce_scatter;
  EXPECT_EQ(sel.choose(rs, any_algorithm), "shm");
  EXPECT_EQ(sel.choose(across(rs), any_algorithm), "mpi");
  // A rule whose algorithm cannot run the call is passed over.
  const auto no_shm = [](std::string_view name) { return name != "shm"; };
  EXPECT_EQ(sel.choose(query(DType::f32, ReduceOp::sum, 32u << 10, 2), no_shm), "mpi");
}

TEST(CollectiveNames, RoundTripAndErrors) {
  for (Collective c : {Collective::barrier, Collective::broadcast, Collective::allreduce,
                       Collective::reduce_scatter, Collective::allgather, Collective::allgatherv,
                       Collective::gather}) {
    EXPECT_EQ(parse_collective(to_string(c)), c);
    const auto names = algorithm_names(c);
    ASSERT_GE(names.size(), 2u);
    EXPECT_EQ(names[0], "default");
    EXPECT_EQ(names[1], "mpi");
  }
  EXPECT_THROW(parse_collective("alltoall"), std::invalid_argument);
  try {
    require_algorithm(Collective::broadcast, "ring");
    FAIL() << "broadcast accepted the ring";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown broadcast algorithm 'ring' (valid: default, mpi, shm)");
  }
}

}  // namespace
}  // namespace mpitrain
