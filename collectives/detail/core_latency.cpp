// measure_core_latency (see core_latency.hpp).

#include "mpitrain/collectives/detail/core_latency.hpp"

#include "mpitrain/collectives/detail/bounded_wait.hpp"

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace mpitrain::detail {
namespace {

// Polls of the word before a waiter yields its core between polls.
constexpr int kSpinPolls = 4096;

using Clock = std::chrono::steady_clock;

// When the wait began and how long it may last (zero: no limit).
struct Deadline {
  Clock::time_point start;
  std::chrono::nanoseconds timeout;
};

// Waits until the word holds `value`; throws WaitExpired once the wait has lasted longer than
// the deadline's timeout (read after every yield: a yield may take a time slice). Not
// ShmSegment::await_word: its pause between polls (~25 ns here) and its futex sleep would be
// part of what is measured.
void await(const std::atomic_ref<std::uint64_t>& word, std::uint64_t value,
           const Deadline& deadline) {
  for (int polls = 0; word.load(std::memory_order_acquire) != value; ++polls) {
    if (polls < kSpinPolls) continue;
    sched_yield();
    const std::chrono::nanoseconds waited = Clock::now() - deadline.start;
    if (deadline.timeout.count() > 0 && waited > deadline.timeout) throw WaitExpired(waited);
  }
}

// Passes the word `round_trips` times there and back from `base`: rank 0 moves it from
// base + 2k to base + 2k + 1, rank 1 on to base + 2k + 2. Returns the word's value after.
// Rank 0 waits for rank 1's last move, so both leave knowing the final value.
std::uint64_t pass(const std::atomic_ref<std::uint64_t>& word, int rank, std::uint64_t base,
                   int round_trips, const Deadline& deadline) {
  for (int k = 0; k < round_trips; ++k) {
    const std::uint64_t even = base + 2 * static_cast<std::uint64_t>(k);
    if (rank == 0) {
      await(word, even, deadline);
      word.store(even + 1, std::memory_order_release);
    } else {
      await(word, even + 1, deadline);
      word.store(even + 2, std::memory_order_release);
    }
  }
  const std::uint64_t end = base + 2 * static_cast<std::uint64_t>(round_trips);
  if (rank == 0) await(word, end, deadline);
  return end;
}

}  // namespace

void reset_probe(const ShmSegment& seg) noexcept {
  if (seg.rank() == 0) seg.probe_word().store(0, std::memory_order_relaxed);
}

std::optional<std::chrono::duration<double, std::nano>> measure_core_latency(
    const ShmSegment& seg, int round_trips, int warmup) {
  const int rank = seg.rank();
  if (seg.size() < 2 || rank > 1 || round_trips <= 0) return std::nullopt;
  seg.require_usable("core_latency_ns");
  const Deadline deadline{Clock::now(), seg.timeout()};
  const std::atomic_ref<std::uint64_t> word = seg.probe_word();
  const std::uint64_t base = pass(word, rank, 0, warmup, deadline);
  const auto start = Clock::now();
  pass(word, rank, base, round_trips, deadline);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (rank != 0) return std::nullopt;
  return took / (2.0 * round_trips);
}

}  // namespace mpitrain::detail
