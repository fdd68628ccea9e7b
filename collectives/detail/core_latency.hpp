#pragma once
// measure_core_latency: how far apart two ranks of a node are, in time. Ranks 0 and 1 of the
// node pass a cache line of the shared segment back and forth (internal to collectives/;
// Communicator::core_latency_ns is the public form).

#include <chrono>
#include <optional>

#include "mpitrain/collectives/detail/shm_segment.hpp"

namespace mpitrain::detail {

// Sets the probe word to 0 on rank 0 of the segment (no-op elsewhere): call it before the
// barrier that precedes measure_core_latency, so that both ranks start from 0 whatever an
// earlier, interrupted measurement left.
void reset_probe(const ShmSegment& seg) noexcept;

// Returns, on rank 0 of the segment, the mean one-way time of `round_trips` round trips of
// the probe word between ranks 0 and 1 (after `warmup` untimed ones); nothing on the other
// ranks and at one rank. Ranks 0 and 1 must both call it after reset_probe and a barrier; the
// other ranks need not call it. A waiter spins, then yields its core, so that two ranks
// sharing one core still progress (and then measure the scheduler); with a timeout on the
// segment, a waiter gives up after it and throws WaitExpired (bounded_wait.hpp), which the
// Communicator reports as any collective's timeout. Throws std::logic_error on a segment
// broken by an earlier timeout.
//
// Cost: warmup + round_trips round trips of one cache line, 2 transfers each; no other
// synchronisation.
std::optional<std::chrono::duration<double, std::nano>> measure_core_latency(
    const ShmSegment& seg, int round_trips, int warmup);

}  // namespace mpitrain::detail
