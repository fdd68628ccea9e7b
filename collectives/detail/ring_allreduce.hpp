#pragma once
// Ring allreduce over point-to-point messages (internal to collectives/; Communicator::allreduce
// with the "ring" algorithm, and the default for large bf16/f16 buffers, call it).
// wire_ring_allreduce.hpp is its variant for fp32 data sent as bf16/f16.
//
// Cost for n ranks and a buffer of B bytes: 2(n-1) steps (n-1 reduce-scatter steps, then n-1
// allgather steps); each rank sends and receives 2(n-1)/n * B bytes and combines
// (n-1)/n * B bytes of elements, whatever the type. Latency term: 2(n-1) message latencies.
// Bandwidth-optimal, so it wins for large buffers; recursive algorithms win for small ones.
//
// Rounding: bf16/f16 travel as 16-bit values; each combining step widens both operands to
// fp32, adds, and rounds once. The result is bitwise identical on every rank by construction:
// every chunk is reduced on exactly one rank and then copied to the others.

#include <mpi.h>

#include <chrono>
#include <cstddef>

#include "mpitrain/collectives/dtype.hpp"
#include "mpitrain/collectives/detail/ring_schedule.hpp"  // kRingSegmentBytes

namespace mpitrain::detail {

// Reduces `count` elements of `type` from every rank of `comm` into recv (send == recv is in
// place). AVG divides the sum by the number of ranks within the last combining step (integers
// truncate; 16-bit formats divide in fp32 before the rounding). `rank` and `size` are those of
// `comm`. Throws MpiError naming the failed call, the rank and the count; with a timeout,
// WaitExpired when a wait for a neighbour's message passes it (bounded_wait.hpp).
void ring_allreduce(MPI_Comm comm, int rank, int size, const void* send, void* recv,
                    std::size_t count, DType type, ReduceOp op,
                    std::size_t segment_bytes = kRingSegmentBytes,
                    std::chrono::nanoseconds timeout = {});

}  // namespace mpitrain::detail
