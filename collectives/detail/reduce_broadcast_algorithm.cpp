// ReduceBroadcastAlgorithm: one plan (reduce to rank 0 in pieces, then broadcast the pieces),
// run with the blocking emitter.

#include "mpitrain/collectives/detail/reduce_broadcast_algorithm.hpp"

#include <algorithm>

#include "mpitrain/collectives/detail/mpi_plan.hpp"
#include "mpitrain/collectives/detail/reduce_kernels.hpp"

namespace mpitrain::detail {
namespace {

// fp32 staging of 16-bit averages goes in pieces of at most this many elements (32 MiB).
constexpr std::size_t kStageElements = std::size_t{8} << 20;

// 16-bit average: fp32 sums reduced and broadcast, divided before the only rounding.
void plan_half_average(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  const std::size_t esize = dtype_bytes(a.type);
  const std::size_t limit = std::min(ctx.max_call, kStageElements);
  for (std::size_t off = 0; off < a.count; off += limit) {
    const std::size_t len = std::min(limit, a.count - off);
    float* stage = e.stage(len);
    widen_to_f32(static_cast<const std::byte*>(a.send) + off * esize, stage, len, a.type);
    e.reduce(ctx.rank == 0 ? MPI_IN_PLACE : stage, stage, len, MPI_FLOAT, MPI_SUM, 0);
    e.bcast(stage, len, MPI_FLOAT, 0);
    std::byte* out = static_cast<std::byte*>(a.recv) + off * esize;
    const DType type = a.type;
    const int size = ctx.size;
    e.then([stage, out, len, type, size] { narrow_from_f32(stage, out, len, type, size); });
  }
}

void plan(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  if (is_half(a.type) && a.reduce == ReduceOp::avg) return plan_half_average(e, a);
  const std::size_t esize = dtype_bytes(a.type);
  const MPI_Datatype dt = CommContext::mpi_type(a.type);
  const MPI_Op op = ctx.mpi_op(a.type, a.reduce);
  const bool root = ctx.rank == 0;
  auto* out = static_cast<std::byte*>(a.recv);
  const auto* in = static_cast<const std::byte*>(a.send);
  for (std::size_t off = 0; off < a.count; off += ctx.max_call) {
    const std::size_t len = std::min(ctx.max_call, a.count - off);
    const void* send = root && in == out ? MPI_IN_PLACE : in + off * esize;
    e.reduce(send, root ? out + off * esize : nullptr, len, dt, op, 0);
    e.bcast(out + off * esize, len, dt, 0);
  }
  if (a.reduce == ReduceOp::avg && ctx.size > 1) {
    void* recv = a.recv;
    const std::size_t count = a.count;
    const DType type = a.type;
    const int size = ctx.size;
    e.then([recv, count, type, size] { divide_inplace(recv, count, type, size); });
  }
}

}  // namespace

std::string ReduceBroadcastAlgorithm::why_not_nonblocking(const CollectiveArgs&) const {
  return "its broadcast reads what its reduce wrote, and posted calls may progress in any "
         "order, so it has no nonblocking form";
}

void ReduceBroadcastAlgorithm::run(const CommContext& ctx, const CollectiveArgs& args) const {
  if (args.has_wire()) return run_wire_by_conversion(ctx, args);
  BlockingEmitter e(ctx, args.op, args.count);
  plan(e, args);
}

}  // namespace mpitrain::detail
