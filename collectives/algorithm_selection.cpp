// AlgorithmSelection: rule matching, and the built-in table.
//
// The built-in rules, measured at 2 ranks (Open MPI 4.1.4, vader/CMA, 2-core AMD EPYC VM
// shared with other work):
//   - f32, f64, i32, i64, u8: MPI_Allreduce with MPI's own type and op, on the caller's
//     buffers, so the engine's default is plain MPI (no rule: the fallback).
//   - bf16, f16: MPI has no such types. MPI_Allreduce with our user ops (fp32 combine, one
//     rounding per combine) has the lower latency for small buffers (one exchange at 2 ranks
//     against the ring's two); the ring, moving the same 16-bit data with AVX2/F16C combines
//     fused into the receive, is faster for larger ones: from 16 KiB * (size() - 1) bytes as
//     sent for sum, max and min, from 2 KiB * (size() - 1) for avg (MPI's path must stage
//     fp32 to divide before the final rounding: twice the traffic). `collective_bench --dtype
//     bf16,f16 --algo all`, 10 runs interleaved: ring time / MPI time for sums 1.05-1.95 at
//     1-8 KiB, 0.6-0.9 from 16 KiB to 1.5 MiB, 0.9-1.02 at 8 MiB, 0.33-0.78 from 16 MiB up;
//     averages 1.35 at 1 KiB, 0.2-0.86 from 2 KiB up. The factor size() - 1 is a heuristic
//     (the ring's latency grows with its 2(n-1) steps).
//   - At 2 ranks, bf16 sums, maxima and minima of [2 MiB, 8 MiB) use MPI: there both
//     algorithms switch run to run between a fast and a slow mode, and in the fast mode the
//     ring reached only 0.91-0.98 x MPI's busbw at 2-4 MiB, below the 0.95 x MPI the default
//     must keep. f16 kept the ring at 0.967 x MPI or better, so it has no band; above 2 ranks
//     nothing could be measured, so the band is not applied.
//   - fp32 data with a 16-bit wire: the fused ring from the same sizes (bytes as sent), for
//     every op, and without the bf16 band (there MPI pays two conversion passes and the fused
//     ring none): bf16 sums ring/MPI time 1.2-1.4 at 1-2 KiB, 0.83-0.92 at 128 KiB-1 MiB,
//     0.67-0.86 from 1.5 to 16 MiB, 0.45 at 32 MiB; f16 sums 0.75-0.99 from 4 KiB to 8 MiB.

#include "mpitrain/collectives/algorithm_selection.hpp"

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

AlgorithmSelection AlgorithmSelection::builtin() {
  const ReduceOpSet combining = reduce_op_set({ReduceOp::sum, ReduceOp::max, ReduceOp::min});
  const ReduceOpSet avg = reduce_op_set({ReduceOp::avg});
  // Returns an allreduce rule for these types and ops from `min_bytes` up (times size() - 1
  // when per_peer), on 2 ranks or more.
  const auto allreduce = [](DTypeSet types, ReduceOpSet reduces, std::size_t min_bytes,
                            bool per_peer, std::string algorithm) {
    SelectionRule r;
    r.types = types;
    r.reduces = reduces;
    r.min_ranks = 2;
    r.min_bytes = min_bytes;
    r.bytes_per_peer = per_peer;
    r.algorithm = std::move(algorithm);
    return r;
  };
  SelectionRule bf16_band =
      allreduce(dtype_set({DType::bf16}), combining, std::size_t{2} << 20, false, "mpi");
  bf16_band.wire = SelectionRule::Wire::no;
  bf16_band.max_ranks = 2;
  bf16_band.end_bytes = std::size_t{8} << 20;
  return AlgorithmSelection({
      bf16_band,
      allreduce(kHalf, avg, kHalfAvgRingMinBytes, true, "ring"),
      allreduce(kHalf, combining, kHalfRingMinBytes, true, "ring"),
  });
}

}  // namespace mpitrain
