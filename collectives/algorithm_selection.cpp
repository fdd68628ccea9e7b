// AlgorithmSelection: rule matching, and the built-in table.
//
// The built-in rules, measured at 2 ranks on one node (Open MPI 4.1.4, vader/CMA, 2-core AMD
// EPYC VM shared with other work), `collective_bench --algo all` with the rows of a size
// interleaved (vs_mpi: busbw over MPI's in the same run; ranges over 2-3 runs of 2026-11-24):
//
// Ranks of one node (shm is there; allreduce bytes are one rank's buffer as sent). Until
// 2026-11-27 shm's waits yielded the core in a loop, and from about 64 KiB its speed varied
// from run to run (f32 allreduce at 4-16 MiB: 1.5-2.3x MPI in one run, 0.75-1.0x in
// another), so the ring had the large sizes. Since its waiters sleep on a futex after 50 us
// (shm_segment.cpp), shm copied through its workspaces (ordinary buffers) beat MPI and the
// ring at every size in 2026-11-27's runs (`--dtype f32,bf16 --algo all --min-bytes 1K
// --max-bytes 256M`, rows interleaved, the machine shared with compilers, load 3-6; and on
// the quiet machine, load 1.1-1.7, with waiters spinning 20 us first, `--algo default`:
// f32 1.41-5.03x MPI at every size from 1 KiB, bf16 1.34-3.56x):
//   - f32 (and the other native types, by bytes): shm at every size: 1.6-3.0x MPI below
//     64 KiB, 1.4-2.4x from 64 KiB to 16 MiB (one run had a dip to 0.44-0.93x at 1-2 MiB under
//     load 6), 2.8-4.1x from 32 MiB; the ring 0.6-2.5x.
//   - bf16, f16: shm at every size: 1.3-2.9x MPI below 64 KiB, 1.4-4.4x above.
//   - fp32 data on a 16-bit wire: the fused ring, as across nodes (below).
//   - reduce_scatter: shm at every size (2.0-10.7x: MPI_Reduce_scatter_block is slow here).
//   - allgather: shm at every size (2026-11-27, ordinary buffers, `--op allgather --algo all
//     --min-bytes 1M`: 1.1-1.75x MPI from 1 to 256 MiB; until its waiters slept it was
//     0.22-0.87x MPI above 8 KiB per rank, where MPI's CMA copies once and shm twice).
//   - broadcast: shm below 32 KiB (1.9-8.2x), MPI above.
//   - The engine's fp32 gradient buckets live in the shared segment and are reduced by shm in
//     place, without copies, at any size (engine/gradient_sync.cpp): these bands, measured on
//     ordinary buffers, do not describe that path. Nor that of ZeRO stage 1, whose
//     reduce_scatter and in-place allgather of those buckets shm runs without copies too
//     (engine/gradient_sync_shard.cpp names shm). A throwaway loop of 2-rank calls on the
//     same arena buffers again and again (warm caches), 64 KiB-16 MiB per block, best of 3,
//     3 runs on a loaded machine (load 4.7, 2026-11-25): in-place allgather MPI time / shm
//     time 2-24 (0.85 once, at 16 MiB); reduce_scatter copying shm / zero-copy shm 3.9-65.
//
// Ranks across nodes, several per node (measured at 2 simulated nodes x 2 ranks, links shaped
// to 2 Gbit/s, scripts/sim_cluster.sh; same VM, load 4-5.4; `sim_cluster.sh run -- sh -c
// 'mpirun --hostfile "$SIM_CLUSTER_HOSTFILE" -np 4 collective_bench --algo all --min-bytes 1K
// --max-bytes 64M'`, f32, 2026-11-27; hierarchical/MPI busbw over 3 runs):
//   - f32, f64, i32, i64, u8: hierarchical in [8 KiB, 64 KiB) (1.39-1.79x MPI; 0.83-1.05x
//     below) and from 256 KiB (1.16-1.92x up to 1 MiB, 1.20-1.52x from 2 MiB to 64 MiB:
//     each node link carries the buffer once each way, a flat ring 1.5 times it). MPI in
//     [64 KiB, 256 KiB), where Open MPI's TCP path gets faster and hierarchical measured
//     0.65-1.17x.
//   - bf16: hierarchical from 256 KiB (one run with --dtype f32,bf16 --min-bytes 256K while
//     another developer's benchmark ran on the machine: 1.21-3.36x the ring's busbw, the rule
//     below, from 256 KiB to 64 MiB as sent; 1.05-2.03x MPI's, except 0.91x at 16 MiB).
//     Below 256 KiB, f16 and 16-bit wires keep the rules below (not measured with
//     hierarchical yet).
// Two nodes of one rank each (2 simulated nodes x 1 rank, 2 Gbit/s links, two runs of
// `scripts/cluster_bench.sh --ranks-per-node 1 -- collective_bench --dtype f32 --algo
// hierarchical --min-bytes 1K`, one of bf16 from 256 KiB and of f16 and f64 from 1 MiB,
// 2026-11-28, idle): hierarchical, which there exchanges the whole buffer between the two
// ranks in eager-sized chunks and combines as they arrive (the link busy 95-99% of a 64 MiB
// call), from 2 MiB for every type: 1.16-1.39x MPI for f32, 1.16-1.35x bf16, 1.20-1.40x f16,
// 1.18-1.28x f64 (sums measured; max and min are the same exchange, avg adds one division
// pass). Below, 0.80-1.10x: MPI and the rules below.
// Ranks across nodes (shm declines; measured on one node unless said otherwise):
//   - f32, f64, i32, i64, u8 at one rank per node: MPI_Allreduce on the caller's buffers (no
//     rule: the fallback), except at 2 nodes from 2 MiB (hierarchical, above).
//   - bf16, f16: MPI has no such types. MPI_Allreduce with our user ops (fp32 combine, one
//     rounding per combine) has the lower latency for small buffers; the ring, moving the
//     same 16-bit data with AVX2/F16C combines fused into the receive, is faster for larger
//     ones: from 16 KiB * (size() - 1) bytes as sent for sum, max and min, from 2 KiB *
//     (size() - 1) for avg (MPI's path must stage fp32 to divide before the final rounding).
//     Ring time / MPI time for sums 1.05-1.95 at 1-8 KiB, 0.6-0.9 from 16 KiB to 1.5 MiB,
//     0.33-0.78 from 16 MiB up; averages 1.35 at 1 KiB, 0.2-0.86 from 2 KiB up. At 2 ranks,
//     bf16 sums, maxima and minima of [2 MiB, 8 MiB) use MPI (there the ring reached only
//     0.91-0.98x MPI's busbw in MPI's fast mode), and from 8 MiB up too when the 2 ranks are
//     on 2 nodes: across 2 simulated nodes at 2 Gbit/s the ring reached 0.67-0.87x MPI's
//     busbw from 8 to 64 MiB in two idle runs (2026-11-28, `scripts/cluster_bench.sh
//     --ranks-per-node 1 -- collective_bench --dtype bf16 --algo all --min-bytes 4M`; sums
//     measured, maxima and minima follow them as they do on one node).
//   - fp32 data with a 16-bit wire: the fused ring from the same sizes (bytes as sent), for
//     every op, without the bf16 band (MPI pays two conversion passes, the fused ring none).

#include "mpitrain/collectives/algorithm_selection.hpp"

#include <tuple>
#include <utility>

namespace mpitrain {
namespace {

constexpr DTypeSet kHalf = dtype_set({DType::bf16, DType::f16});
constexpr std::size_t kHalfRingMinBytes = std::size_t{16} << 10;
constexpr std::size_t kHalfAvgRingMinBytes = std::size_t{2} << 10;

bool contains(std::uint32_t set, unsigned bit) noexcept { return (set >> bit) & 1U; }

}  // namespace

bool SelectionRule::matches(const SelectionQuery& q) const noexcept {
  if (q.op != op || !contains(types, static_cast<unsigned>(q.type)) ||
      !contains(reduces, static_cast<unsigned>(q.reduce))) {
    return false;
  }
  if ((wire == Wire::no && q.wire) || (wire == Wire::yes && !q.wire)) return false;
  if (q.ranks < min_ranks || q.ranks > max_ranks) return false;
  if (q.local_ranks < min_local_ranks || q.local_ranks > max_local_ranks) return false;
  if (q.nodes < min_nodes || q.nodes > max_nodes) return false;
  const std::size_t scale = bytes_per_peer ? static_cast<std::size_t>(q.ranks - 1) : 1;
  const std::size_t lo = min_bytes * scale;
  const std::size_t hi =
      end_bytes == std::numeric_limits<std::size_t>::max() ? end_bytes : end_bytes * scale;
  return q.bytes >= lo && q.bytes < hi;
}

AlgorithmSelection::AlgorithmSelection(std::vector<SelectionRule> rules)
    : rules_(std::move(rules)) {}

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * KiB;
constexpr std::size_t kNoEnd = std::numeric_limits<std::size_t>::max();

// Returns a rule sending `op` on `types` of [min_bytes, end_bytes) to `algorithm`, on 2 ranks
// or more (callers narrow it further).
SelectionRule rule(Collective op, DTypeSet types, std::size_t min_bytes, std::size_t end_bytes,
                   std::string algorithm) {
  SelectionRule r;
  r.op = op;
  r.types = types;
  r.min_ranks = 2;
  r.min_bytes = min_bytes;
  r.end_bytes = end_bytes;
  r.algorithm = std::move(algorithm);
  return r;
}

// Returns the rules for 2 or more ranks on one node: shared memory for every allreduce but
// fp32 data on a 16-bit wire, every reduce_scatter and allgather, small broadcasts, from the
// measurements at the top of this file.
std::vector<SelectionRule> one_node_rules() {
  // Returns an allreduce band of ordinary (not 16-bit wire) data.
  const auto band = [](DTypeSet types, std::size_t min_bytes, std::size_t end_bytes,
                       std::string algorithm) {
    SelectionRule r = rule(Collective::allreduce, types, min_bytes, end_bytes, std::move(algorithm));
    r.wire = SelectionRule::Wire::no;
    return r;
  };
  const DTypeSet native = dtype_set({DType::f32, DType::f64, DType::i32, DType::i64, DType::u8});
  std::vector<SelectionRule> rules = {
      band(native, 0, kNoEnd, "shm"),
      band(kHalf, 0, kNoEnd, "shm"),
      rule(Collective::reduce_scatter, kAnyDType, 0, kNoEnd, "shm"),
      rule(Collective::allgather, kAnyDType, 0, kNoEnd, "shm"),
      rule(Collective::broadcast, kAnyDType, 0, 32 * KiB, "shm"),
  };
  for (SelectionRule& r : rules) r.max_nodes = 1;
  return rules;
}

}  // namespace

AlgorithmSelection AlgorithmSelection::builtin() {
  const ReduceOpSet combining = reduce_op_set({ReduceOp::sum, ReduceOp::max, ReduceOp::min});
  const ReduceOpSet avg = reduce_op_set({ReduceOp::avg});
  // Returns an allreduce rule for these types and ops from `min_bytes` up (times size() - 1
  // when per_peer).
  const auto allreduce = [](DTypeSet types, ReduceOpSet reduces, std::size_t min_bytes,
                            bool per_peer, std::string algorithm) {
    SelectionRule r = rule(Collective::allreduce, types, min_bytes, kNoEnd, std::move(algorithm));
    r.reduces = reduces;
    r.bytes_per_peer = per_peer;
    return r;
  };
  std::vector<SelectionRule> rules = one_node_rules();
  // Across nodes with several ranks per node: hierarchical for the native types in
  // [8 KiB, 64 KiB) and from 256 KiB (MPI between), for bf16 from 256 KiB.
  const DTypeSet native = dtype_set({DType::f32, DType::f64, DType::i32, DType::i64, DType::u8});
  for (const auto& [types, lo, hi] :
       {std::tuple{native, 8 * KiB, 64 * KiB}, std::tuple{native, 256 * KiB, kNoEnd},
        std::tuple{dtype_set({DType::bf16}), 256 * KiB, kNoEnd}}) {
    SelectionRule hierarchical = rule(Collective::allreduce, types, lo, hi, "hierarchical");
    hierarchical.wire = SelectionRule::Wire::no;
    hierarchical.min_nodes = 2;
    hierarchical.min_local_ranks = 2;
    rules.push_back(hierarchical);
  }
  // 2 nodes of one rank each: hierarchical (its pairwise exchange) for every type from 2 MiB.
  SelectionRule pair = rule(Collective::allreduce, kAnyDType, 2 * MiB, kNoEnd, "hierarchical");
  pair.wire = SelectionRule::Wire::no;
  pair.min_nodes = 2;
  pair.max_nodes = 2;
  pair.max_local_ranks = 1;
  pair.max_ranks = 2;
  rules.push_back(pair);
  // Across nodes (shm declines): MPI, the ring for 16-bit types as measured on one node.
  SelectionRule bf16_band =
      allreduce(dtype_set({DType::bf16}), combining, 2 * MiB, false, "mpi");
  bf16_band.wire = SelectionRule::Wire::no;
  bf16_band.max_ranks = 2;
  bf16_band.end_bytes = 8 * MiB;
  rules.push_back(bf16_band);
  // Measured across nodes, at one rank per node: MPI above the band too.
  SelectionRule bf16_across = bf16_band;
  bf16_across.min_bytes = 8 * MiB;
  bf16_across.end_bytes = kNoEnd;
  bf16_across.min_nodes = 2;
  rules.push_back(bf16_across);
  rules.push_back(allreduce(kHalf, avg, kHalfAvgRingMinBytes, true, "ring"));
  rules.push_back(allreduce(kHalf, combining, kHalfRingMinBytes, true, "ring"));
  return AlgorithmSelection(std::move(rules));
}

}  // namespace mpitrain
