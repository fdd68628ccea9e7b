// SharedBuffer: the handle marks its memory released exactly when it stops owning it (end,
// reset, being assigned over), never when it is moved from, and a moved-from or empty handle
// releases nothing. The marks' effect on the node's memory is tested with the segment
// (shm_segment_test.cpp) and the Communicator (communicator_test.cpp).

#include "mpitrain/collectives/shared_buffer.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <utility>

namespace mpitrain {
namespace {

using Mark = std::shared_ptr<std::atomic<bool>>;

Mark unreleased() { return std::make_shared<std::atomic<bool>>(false); }

TEST(SharedBufferTest, ReleasesWhenItEnds) {
  std::array<std::byte, 64> memory{};
  const Mark mark = unreleased();
  {
    const SharedBuffer buffer(memory, mark);
    EXPECT_EQ(buffer.bytes().data(), memory.data());
    EXPECT_EQ(buffer.bytes().size(), 64u);
    EXPECT_FALSE(mark->load());
  }
  EXPECT_TRUE(mark->load());
}

TEST(SharedBufferTest, ResetReleasesAndEmpties) {
  std::array<std::byte, 64> memory{};
  const Mark mark = unreleased();
  SharedBuffer buffer(memory, mark);
  buffer.reset();
  EXPECT_TRUE(mark->load());
  EXPECT_TRUE(buffer.bytes().empty());
  buffer.reset();  // nothing left to release
  EXPECT_TRUE(buffer.bytes().empty());
}

TEST(SharedBufferTest, AMoveHandsOverWithoutReleasing) {
  std::array<std::byte, 64> memory{};
  const Mark mark = unreleased();
  SharedBuffer first(memory, mark);
  SharedBuffer second(std::move(first));
  EXPECT_FALSE(mark->load());
  EXPECT_TRUE(first.bytes().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(second.bytes().data(), memory.data());
  SharedBuffer third;
  third = std::move(second);
  EXPECT_FALSE(mark->load());
  EXPECT_EQ(third.bytes().size(), 64u);
  first.reset();
  second.reset();
  EXPECT_FALSE(mark->load());  // neither owned it any more
  third.reset();
  EXPECT_TRUE(mark->load());
}

TEST(SharedBufferTest, AssigningOverAHandleReleasesWhatItHeld) {
  std::array<std::byte, 64> memory_a{};
  std::array<std::byte, 128> memory_b{};
  const Mark mark_a = unreleased();
  const Mark mark_b = unreleased();
  SharedBuffer a(memory_a, mark_a);
  a = SharedBuffer(memory_b, mark_b);
  EXPECT_TRUE(mark_a->load());
  EXPECT_FALSE(mark_b->load());
  EXPECT_EQ(a.bytes().size(), 128u);
  SharedBuffer& same = a;
  a = std::move(same);  // self-assignment keeps the memory
  EXPECT_FALSE(mark_b->load());
  EXPECT_EQ(a.bytes().size(), 128u);
}

TEST(SharedBufferTest, AnEmptyHandleHoldsNothing) {
  SharedBuffer buffer;
  EXPECT_TRUE(buffer.bytes().empty());
  buffer.reset();
  EXPECT_TRUE(buffer.bytes().empty());
}

}  // namespace
}  // namespace mpitrain
