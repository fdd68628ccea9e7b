// MpiAlgorithm: one plan per collective, issued to a blocking or a posting emitter.

#include "mpitrain/collectives/detail/mpi_algorithm.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/collectives/detail/mpi_plan.hpp"
#include "mpitrain/collectives/detail/reduce_kernels.hpp"

namespace mpitrain::detail {
namespace {

// fp32 staging of 16-bit averages goes in pieces of at most this many elements, bounding the
// blocking form's extra memory to 32 MiB per call.
constexpr std::size_t kStageElements = std::size_t{8} << 20;
constexpr int kGatherTag = 0x4741;  // point-to-point fallback of gather ("GA")

const std::byte* bytes(const void* p) noexcept { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) noexcept { return static_cast<std::byte*>(p); }

// Calls fn(offset, length) for consecutive pieces of at most `limit` elements.
template <class Fn> void pieces(std::size_t count, std::size_t limit, Fn&& fn) {
  for (std::size_t off = 0; off < count; off += limit) fn(off, std::min(limit, count - off));
}

// Returns the offset of each rank's block in an allgatherv output (elements), after checking
// that recv_counts has one entry per rank and that this rank's entry is send_count; throws
// std::invalid_argument naming the call and the rank otherwise.
std::vector<std::size_t> allgatherv_displacements(const CommContext& ctx,
                                                  const CollectiveArgs& args) {
  const std::string where = "allgatherv on rank " + std::to_string(ctx.rank) + ": ";
  const auto counts = args.recv_counts;
  if (counts.size() != static_cast<std::size_t>(ctx.size)) {
    throw std::invalid_argument(where + "recv_counts has " + std::to_string(counts.size()) +
                                " entries for " + std::to_string(ctx.size) + " ranks");
  }
  if (counts[static_cast<std::size_t>(ctx.rank)] != args.count) {
    throw std::invalid_argument(where + "send_count " + std::to_string(args.count) +
                                " differs from recv_counts[" + std::to_string(ctx.rank) + "] = " +
                                std::to_string(counts[static_cast<std::size_t>(ctx.rank)]));
  }
  std::vector<std::size_t> displs(counts.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = total;
    total += counts[r];
  }
  return displs;
}

// 16-bit average: sum fp32 copies, divide before the only rounding to 16 bits.
void plan_half_average(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  const std::size_t esize = dtype_bytes(a.type);
  pieces(a.count, std::min(ctx.max_call, kStageElements), [&](std::size_t off, std::size_t len) {
    float* stage = e.stage(len);
    widen_to_f32(bytes(a.send) + off * esize, stage, len, a.type);
    e.allreduce(MPI_IN_PLACE, stage, len, MPI_FLOAT, MPI_SUM);
    std::byte* out = bytes(a.recv) + off * esize;
    const DType type = a.type;
    const int size = ctx.size;
    e.then([stage, out, len, type, size] { narrow_from_f32(stage, out, len, type, size); });
  });
}

void plan_allreduce(MpiEmitter& e, const CollectiveArgs& a) {
  if (a.count == 0) return;
  const CommContext& ctx = e.context();
  if (is_half(a.type) && a.reduce == ReduceOp::avg) return plan_half_average(e, a);
  const std::size_t esize = dtype_bytes(a.type);
  const bool in_place = a.send == a.recv;
  const MPI_Datatype dt = CommContext::mpi_type(a.type);
  const MPI_Op op = ctx.mpi_op(a.type, a.reduce);
  pieces(a.count, ctx.max_call, [&](std::size_t off, std::size_t len) {
    e.allreduce(in_place ? MPI_IN_PLACE : bytes(a.send) + off * esize, bytes(a.recv) + off * esize,
                len, dt, op);
  });
  if (a.reduce == ReduceOp::avg && ctx.size > 1) {
    void* recv = a.recv;
    const std::size_t count = a.count;
    const DType type = a.type;
    const int size = ctx.size;
    e.then([recv, count, type, size] { divide_inplace(recv, count, type, size); });
  }
}

void plan_broadcast(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  const std::size_t esize = dtype_bytes(a.type);
  pieces(a.count, ctx.max_call, [&](std::size_t off, std::size_t len) {
    e.bcast(bytes(a.recv) + off * esize, len, CommContext::mpi_type(a.type), a.root);
  });
}

// Divides `len` results at `out` by the world size once they have arrived (averages).
void then_divide(MpiEmitter& e, void* out, std::size_t len, DType type) {
  const int size = e.context().size;
  if (size > 1) e.then([out, len, type, size] { divide_inplace(out, len, type, size); });
}

// Blocks too long for one call: one reduce per destination rank, in pieces.
void plan_reduce_scatter_by_reduces(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  const std::size_t esize = dtype_bytes(a.type);
  const bool half_avg = is_half(a.type) && a.reduce == ReduceOp::avg;
  const std::size_t limit = half_avg ? std::min(ctx.max_call, kStageElements) : ctx.max_call;
  for (int r = 0; r < ctx.size; ++r) {
    pieces(a.count, limit, [&](std::size_t off, std::size_t len) {
      const std::byte* src = bytes(a.send) + (static_cast<std::size_t>(r) * a.count + off) * esize;
      std::byte* dst = r == ctx.rank ? bytes(a.recv) + off * esize : nullptr;
      if (half_avg) {
        float* stage = e.stage(2 * len);
        widen_to_f32(src, stage, len, a.type);
        e.reduce(stage, stage + len, len, MPI_FLOAT, MPI_SUM, r);
        const DType type = a.type;
        const int size = ctx.size;
        if (dst) e.then([stage, dst, len, type, size] {
          narrow_from_f32(stage + len, dst, len, type, size);
        });
        return;
      }
      e.reduce(src, dst, len, CommContext::mpi_type(a.type), ctx.mpi_op(a.type, a.reduce), r);
      if (dst && a.reduce == ReduceOp::avg) then_divide(e, dst, len, a.type);
    });
  }
}

void plan_reduce_scatter(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  if (a.count == 0) return;
  if (a.send == a.recv) {
    throw std::invalid_argument("reduce_scatter on rank " + std::to_string(ctx.rank) +
                                ": send and recv must be different buffers");
  }
  const std::size_t total = a.count * static_cast<std::size_t>(ctx.size);
  const bool half_avg = is_half(a.type) && a.reduce == ReduceOp::avg;
  if (a.count > ctx.max_call || (half_avg && total > kStageElements)) {
    return plan_reduce_scatter_by_reduces(e, a);
  }
  if (half_avg) {  // fp32 sums, divided before the only rounding to 16 bits
    float* stage = e.stage(total + a.count);
    widen_to_f32(a.send, stage, total, a.type);
    e.reduce_scatter_block(stage, stage + total, a.count, MPI_FLOAT, MPI_SUM);
    void* recv = a.recv;
    const std::size_t count = a.count;
    const DType type = a.type;
    const int size = ctx.size;
    e.then([stage, total, recv, count, type, size] {
      narrow_from_f32(stage + total, recv, count, type, size);
    });
    return;
  }
  e.reduce_scatter_block(a.send, a.recv, a.count, CommContext::mpi_type(a.type),
                         ctx.mpi_op(a.type, a.reduce));
  if (a.reduce == ReduceOp::avg) then_divide(e, a.recv, a.count, a.type);
}

// Broadcasts each rank's block of `recv` from that rank, in pieces: the fallback of the
// gathers whose blocks or totals exceed one MPI call. `displs` and `counts` in elements.
void plan_blocks_by_broadcasts(MpiEmitter& e, void* recv, std::span<const std::size_t> displs,
                               std::span<const std::size_t> counts, DType type) {
  const CommContext& ctx = e.context();
  const std::size_t esize = dtype_bytes(type);
  for (int r = 0; r < ctx.size; ++r) {
    std::byte* block = bytes(recv) + displs[static_cast<std::size_t>(r)] * esize;
    pieces(counts[static_cast<std::size_t>(r)], ctx.max_call, [&](std::size_t off, std::size_t len) {
      e.bcast(block + off * esize, len, CommContext::mpi_type(type), r);
    });
  }
}

void plan_allgather(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  if (a.count == 0) return;
  const std::size_t esize = dtype_bytes(a.type);
  std::byte* own = bytes(a.recv) + static_cast<std::size_t>(ctx.rank) * a.count * esize;
  const bool in_place = a.send == own;
  if (a.count * static_cast<std::size_t>(ctx.size) <= ctx.max_call) {
    e.allgather(in_place ? MPI_IN_PLACE : a.send, a.recv, a.count, CommContext::mpi_type(a.type));
    return;
  }
  if (!in_place) std::memcpy(own, a.send, a.count * esize);
  std::vector<std::size_t> displs(static_cast<std::size_t>(ctx.size));
  for (std::size_t r = 0; r < displs.size(); ++r) displs[r] = r * a.count;
  const std::vector<std::size_t> counts(displs.size(), a.count);
  plan_blocks_by_broadcasts(e, a.recv, displs, counts, a.type);
}

void plan_allgatherv(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  const std::vector<std::size_t> displs = allgatherv_displacements(ctx, a);
  const std::size_t total = displs.back() + a.recv_counts.back();
  if (total == 0) return;
  const std::size_t esize = dtype_bytes(a.type);
  std::byte* own = bytes(a.recv) + displs[static_cast<std::size_t>(ctx.rank)] * esize;
  const bool in_place = a.send == own;
  if (total <= ctx.max_call) {
    std::vector<int> counts(a.recv_counts.size());
    std::vector<int> offsets(a.recv_counts.size());
    for (std::size_t r = 0; r < counts.size(); ++r) {
      counts[r] = static_cast<int>(a.recv_counts[r]);
      offsets[r] = static_cast<int>(displs[r]);
    }
    e.allgatherv(in_place ? MPI_IN_PLACE : a.send, a.count, a.recv, std::move(counts),
                 std::move(offsets), CommContext::mpi_type(a.type));
    return;
  }
  if (!in_place && a.count > 0) std::memcpy(own, a.send, a.count * esize);
  plan_blocks_by_broadcasts(e, a.recv, displs, a.recv_counts, a.type);
}

void plan_gather(MpiEmitter& e, const CollectiveArgs& a) {
  const CommContext& ctx = e.context();
  if (a.count == 0) return;
  const std::size_t esize = dtype_bytes(a.type);
  const MPI_Datatype dt = CommContext::mpi_type(a.type);
  const bool is_root = ctx.rank == a.root;
  std::byte* own =
      is_root ? bytes(a.recv) + static_cast<std::size_t>(a.root) * a.count * esize : nullptr;
  const bool in_place = is_root && a.send == own;
  if (a.count * static_cast<std::size_t>(ctx.size) <= ctx.max_call) {
    e.gather(in_place ? MPI_IN_PLACE : a.send, a.recv, a.count, dt, a.root);
    return;
  }
  // Too long for one call: point-to-point pieces to the root. Every message from one rank to
  // the root carries the same tag, so pieces match in order even with other gathers in
  // flight (MPI does not let messages overtake).
  if (!is_root) {
    pieces(a.count, ctx.max_call, [&](std::size_t off, std::size_t len) {
      e.send(bytes(a.send) + off * esize, len, dt, a.root, kGatherTag);
    });
    return;
  }
  for (int r = 0; r < ctx.size; ++r) {
    if (r == a.root) continue;
    std::byte* block = bytes(a.recv) + static_cast<std::size_t>(r) * a.count * esize;
    pieces(a.count, ctx.max_call, [&](std::size_t off, std::size_t len) {
      e.recv(block + off * esize, len, dt, r, kGatherTag);
    });
  }
  if (!in_place) std::memcpy(own, a.send, a.count * esize);
}

void plan(MpiEmitter& e, const CollectiveArgs& a) {
  switch (a.op) {
    case Collective::barrier: return e.barrier();
    case Collective::broadcast: return plan_broadcast(e, a);
    case Collective::allreduce: return plan_allreduce(e, a);
    case Collective::reduce_scatter: return plan_reduce_scatter(e, a);
    case Collective::allgather: return plan_allgather(e, a);
    case Collective::allgatherv: return plan_allgatherv(e, a);
    case Collective::gather: return plan_gather(e, a);
  }
}

}  // namespace

std::string MpiAlgorithm::why_not_nonblocking(const CollectiveArgs& args) const {
  return args.has_wire() ? "fp32 data with a 16-bit wire has no nonblocking form" : "";
}

void MpiAlgorithm::run(const CommContext& ctx, const CollectiveArgs& args) const {
  if (args.has_wire()) return run_wire_by_conversion(ctx, args);
  BlockingEmitter e(ctx, args.op, args.count);
  plan(e, args);
}

Request MpiAlgorithm::post(const CommContext& ctx, const CollectiveArgs& args) const {
  PostingEmitter e(ctx, args.op, args.count);
  plan(e, args);
  return e.finish();
}

}  // namespace mpitrain::detail
