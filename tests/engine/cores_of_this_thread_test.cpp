// cores_of_this_thread: the calling thread's affinity mask, counted: a thread pinned to one
// CPU sees 1, one pinned to two CPUs (where the machine has them) sees 2, and no thread sees
// more CPUs than the machine has.

#include "mpitrain/engine/cores_of_this_thread.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <thread>

namespace mpitrain {
namespace {

// Returns what cores_of_this_thread() says on a new thread pinned to CPUs 0..count-1 of the
// caller's mask, or 0 when pinning failed.
std::size_t seen_when_pinned_to(std::size_t count) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) return 0;
  cpu_set_t pinned;
  CPU_ZERO(&pinned);
  std::size_t taken = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && taken < count; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) {
      CPU_SET(cpu, &pinned);
      ++taken;
    }
  }
  std::size_t seen = 0;
  std::thread t([&] {
    if (pthread_setaffinity_np(pthread_self(), sizeof(pinned), &pinned) == 0) seen = cores_of_this_thread();
  });
  t.join();
  return seen;
}

TEST(CoresOfThisThread, NoMoreThanTheMaskCanHold) {
  const std::size_t all = cores_of_this_thread();
  EXPECT_GE(all, 1u);
  EXPECT_LE(all, static_cast<std::size_t>(CPU_SETSIZE));
}

TEST(CoresOfThisThread, AThreadPinnedToOneCpuSeesOne) { EXPECT_EQ(seen_when_pinned_to(1), 1u); }

TEST(CoresOfThisThread, AThreadPinnedToTwoCpusSeesTwo) {
  if (cores_of_this_thread() < 2) {
    GTEST_SKIP() << "this process may run on one CPU only (its affinity mask): nothing to pin to two";
  }
  EXPECT_EQ(seen_when_pinned_to(2), 2u);
}

}  // namespace
}  // namespace mpitrain
