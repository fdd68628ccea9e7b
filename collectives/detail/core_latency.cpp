// measure_core_latency (see core_latency.hpp).

#include "mpitrain/collectives/detail/core_latency.hpp"

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mpitrain::detail {
namespace {

// Polls of the word before a waiter yields its core between polls, and between clock reads.
constexpr int kSpinPolls = 4096;

using Clock = std::chrono::steady_clock;

// Waits until the word holds `value`; past `deadline` (time_point::max() when the segment
// has no timeout) throws, naming the rank and the value waited for.
void await(const std::atomic_ref<std::uint64_t>& word, std::uint64_t value, int rank,
           Clock::time_point deadline) {
  for (long polls = 0; word.load(std::memory_order_acquire) != value; ++polls) {
    if (polls < kSpinPolls) continue;
    sched_yield();
    if (polls % kSpinPolls == 0 && Clock::now() > deadline) {
      throw std::runtime_error("core_latency_ns: rank " + std::to_string(rank) +
                               " of the node waited past the communicator's timeout for " +
                               "its peer to pass the probe word (value " +
                               std::to_string(value) + ")");
    }
  }
}

// Passes the word `round_trips` times there and back from `base`: rank 0 moves it from
// base + 2k to base + 2k + 1, rank 1 on to base + 2k + 2. Returns the word's value after.
// Rank 0 waits for rank 1's last move, so both leave knowing the final value.
std::uint64_t pass(const std::atomic_ref<std::uint64_t>& word, int rank, std::uint64_t base,
                   int round_trips, Clock::time_point deadline) {
  for (int k = 0; k < round_trips; ++k) {
    const std::uint64_t even = base + 2 * static_cast<std::uint64_t>(k);
    if (rank == 0) {
      await(word, even, rank, deadline);
      word.store(even + 1, std::memory_order_release);
    } else {
      await(word, even + 1, rank, deadline);
      word.store(even + 2, std::memory_order_release);
    }
  }
  const std::uint64_t end = base + 2 * static_cast<std::uint64_t>(round_trips);
  if (rank == 0) await(word, end, rank, deadline);
  return end;
}

}  // namespace

std::optional<std::chrono::duration<double, std::nano>> measure_core_latency(
    const ShmSegment& seg, int round_trips, int warmup) {
  const int rank = seg.rank();
  if (seg.size() < 2 || rank > 1 || round_trips <= 0) return std::nullopt;
  seg.require_usable("core_latency_ns");
  const Clock::time_point deadline =
      seg.timeout().count() > 0 ? Clock::now() + seg.timeout() : Clock::time_point::max();
  const std::atomic_ref<std::uint64_t> word = seg.probe_word();
  // The word is even between calls. Rank 0 may already have made it odd (its first move
  // needs nobody) when rank 1 reads it, never more: its next move waits for rank 1.
  const std::uint64_t start_value = word.load(std::memory_order_acquire) & ~std::uint64_t{1};
  const std::uint64_t base = pass(word, rank, start_value, warmup, deadline);
  const auto start = Clock::now();
  pass(word, rank, base, round_trips, deadline);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (rank != 0) return std::nullopt;
  return took / (2.0 * round_trips);
}

}  // namespace mpitrain::detail
