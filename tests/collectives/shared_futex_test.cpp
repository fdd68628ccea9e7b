// futex_sleep / futex_wake_all on a word of a MAP_SHARED mapping (the kind of memory the
// shared-memory segment lives in): a sleeper returns when the word already differs, when
// woken after a change, and after its maximum sleep when nothing happens. Across processes the
// same calls are exercised by shm_segment_test (a waiter asleep on a late rank).

#include "mpitrain/collectives/detail/shared_futex.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace mpitrain {
namespace {

using detail::futex_sleep;
using detail::futex_wake_all;
using Clock = std::chrono::steady_clock;

// One 8-byte word in a MAP_SHARED page, unmapped at the end of the test.
class SharedWord {
 public:
  SharedWord() {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of one shared page failed");
    page_ = p;
  }
  ~SharedWord() { munmap(page_, 4096); }
  SharedWord(const SharedWord&) = delete;
  SharedWord& operator=(const SharedWord&) = delete;
  std::uint64_t* get() const { return static_cast<std::uint64_t*>(page_); }
  std::atomic_ref<std::uint64_t> ref() const { return std::atomic_ref<std::uint64_t>(*get()); }

 private:
  void* page_ = nullptr;
};

TEST(SharedFutex, ReturnsAtOnceWhenTheWordAlreadyDiffers) {
  SharedWord word;
  word.ref().store(7);
  const Clock::time_point start = Clock::now();
  EXPECT_TRUE(futex_sleep(word.get(), 6, std::chrono::seconds(10)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(SharedFutex, ComparesTheLowHalfOfTheWord) {
  // 2^32 + 5 and 5 agree in their low 32 bits: the sleeper takes them as equal and sleeps out
  // its time; 2^32 + 5 and 6 differ there.
  SharedWord word;
  word.ref().store((std::uint64_t{1} << 32) + 5);
  EXPECT_FALSE(futex_sleep(word.get(), 5, std::chrono::milliseconds(20)));
  EXPECT_TRUE(futex_sleep(word.get(), 6, std::chrono::seconds(10)));
}

TEST(SharedFutex, SleepsItsTimeWhenNobodyWakesIt) {
  SharedWord word;
  word.ref().store(3);
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(futex_sleep(word.get(), 3, std::chrono::milliseconds(50)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(50));
}

TEST(SharedFutex, AStoreAndAWakeEndTheSleep) {
  // The sleeper announces itself, then sleeps for up to 30 s on value 1; the waker stores 2
  // and wakes it once it has announced itself. Whether the store lands before or during the
  // sleep, the sleeper returns with 2 long before its 30 s are over.
  SharedWord word;
  word.ref().store(1);
  std::atomic<bool> announced{false};
  std::atomic<std::uint64_t> seen{0};
  const Clock::time_point start = Clock::now();
  std::thread sleeper([&] {
    announced.store(true);
    while (word.ref().load() == 1) futex_sleep(word.get(), 1, std::chrono::seconds(30));
    seen.store(word.ref().load());
  });
  while (!announced.load()) std::this_thread::yield();
  word.ref().store(2);
  futex_wake_all(word.get());
  sleeper.join();
  EXPECT_EQ(seen.load(), 2u);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST(SharedFutex, AWakeWithNobodyAsleepIsHarmless) {
  SharedWord word;
  futex_wake_all(word.get());
  EXPECT_EQ(word.ref().load(), 0u);
}

}  // namespace
}  // namespace mpitrain
