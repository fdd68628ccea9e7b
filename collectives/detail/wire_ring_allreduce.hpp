#pragma once
// Ring allreduce of fp32 data with a 16-bit wire format (internal to collectives/;
// Communicator::allreduce(std::span<float>, ReduceOp, DType wire, ...) calls it).
//
// What it computes: exactly what converting the data to `wire` (bf16 or f16), running
// ring_allreduce on the 16-bit buffer and converting the result back gives, bit for bit, but
// with no pass of its own over the whole buffer: each rank rounds only the chunk it sends
// first and the local operand of each combine, inside the combining loop, and widens each
// result segment into the fp32 data as it arrives.
//
// Cost for n ranks and `count` values (B = 2 * count bytes as sent):
//   steps          2(n-1): n-1 reduce-scatter steps, then n-1 allgather steps, each split into
//                  messages of at most segment_bytes; 2(n-1) message latencies.
//   on the wire    each rank sends and receives 2(n-1)/n * B bytes (half of fp32's).
//   conversions    every fp32 value is read once and rounded once (count/n of them for the
//                  first send, the rest as the local operand of a combine), and written once
//                  (count/n by the last combine, the rest as received 16-bit values are
//                  widened); no separate conversion pass.
//   memory traffic per value: read 4 bytes and write 4 bytes of fp32 data, plus the 16-bit
//                  traffic of ring_allreduce; scratch: `wire_image`, 2 * count bytes.
// Rounding: as ring_allreduce: each combine widens both 16-bit operands to fp32, adds, and
// rounds once (avg divides in fp32 within the last combine). The result is bitwise identical
// on every rank: each chunk is reduced on one rank, which keeps exactly the rounded value it
// sends (its fp32 data gets that value widened), and the others widen the same 16 bits.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "mpitrain/collectives/dtype.hpp"
#include "mpitrain/collectives/detail/ring_schedule.hpp"

namespace mpitrain::detail {

// Allreduces `count` fp32 values of `data` in place over `comm`, sending them as `wire` (bf16
// or f16), with `op` as ring_allreduce applies it. `wire_image` is scratch of `count` 16-bit
// values (its contents on return: the result in the wire format). `rank` and `size` are
// those of `comm`. One rank: data becomes float(round(data)). Throws MpiError naming the
// failed call, the rank and the count; with a timeout, WaitExpired when
// a wait for a neighbour's message passes it (bounded_wait.hpp).
void wire_ring_allreduce(MPI_Comm comm, int rank, int size, float* data,
                         std::uint16_t* wire_image, std::size_t count, DType wire, ReduceOp op,
                         std::size_t segment_bytes = kRingSegmentBytes,
                         std::chrono::nanoseconds timeout = {});

}  // namespace mpitrain::detail
