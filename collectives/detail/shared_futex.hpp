#pragma once
// Sleeping on a word of shared memory until another process changes it (internal to
// collectives/): Linux futexes on a MAP_SHARED mapping, which work across processes (the
// kernel keys them by the mapped page, not by the address). ShmSegment's waits use them once
// spinning has lasted long enough that the waiter would otherwise take the core of the rank
// it waits for (two ranks and a communication thread on two cores).
//
// Protocol without lost wake-ups (a Dekker pair; both sides sequentially consistent):
//   waiter: sleepers.fetch_add(1); v = word.load(); if (not ready(v)) futex_sleep(word, v);
//           sleepers.fetch_sub(1)
//   waker:  word.store(new); if (sleepers.load() > 0) futex_wake_all(word)
// Either the waiter sees the new value, or the waker sees the sleeper; and the kernel checks
// that the word still holds `v` when the waiter goes to sleep, so a store between the
// waiter's load and its sleep makes the sleep return at once.

#include <chrono>
#include <cstdint>

namespace mpitrain::detail {

// Sleeps while the low 32 bits of `word` (8-byte aligned, in shared memory) equal the low 32
// bits of `observed`, for at most `max_sleep`. Returns true when woken or when the word
// differed already, false when `max_sleep` passed; also returns (true) on a signal. A
// 64-bit counter compared on its low half: it would have to advance by 2^32 during one
// sleep to be mistaken. Throws std::system_error naming futex(FUTEX_WAIT) on any other error.
bool futex_sleep(const std::uint64_t* word, std::uint64_t observed,
                 std::chrono::nanoseconds max_sleep);

// Wakes every thread of every process sleeping in futex_sleep on `word`. Throws
// std::system_error naming futex(FUTEX_WAKE) on error.
void futex_wake_all(const std::uint64_t* word);

}  // namespace mpitrain::detail
