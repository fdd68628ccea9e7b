// ShmSegment: every rank sees every peer's workspaces and control slots, the arena hands out
// the same offset on every rank and finds peers' buffers there, sequence numbers order the
// ranks' writes, and a wait past the timeout names the ranks that did not arrive.

#include "mpitrain/collectives/detail/shm_segment.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>

#include "shm_test_support.hpp"

namespace mpitrain {
namespace {

using detail::ShmOptions;
using detail::ShmSegment;
using detail::ShmTimeout;

class ShmSegmentTest : public ::testing::Test {
 protected:
  test::NodeComm node_;
};

TEST_F(ShmSegmentTest, PeersSeeEachOthersWorkspaces) {
  ShmSegment seg(node_.get(), ShmOptions{.workspace_bytes = 10000});
  EXPECT_EQ(seg.rank(), node_.rank());
  EXPECT_EQ(seg.size(), node_.size());
  EXPECT_EQ(seg.workspace_bytes(), 12288u);  // rounded up to whole pages
  for (int b = 0; b < 2; ++b) {
    std::memset(seg.workspace_in(seg.rank(), b), 10 * seg.rank() + b, seg.workspace_bytes());
    std::memset(seg.workspace_out(seg.rank(), b), 10 * seg.rank() + b + 5, seg.workspace_bytes());
  }
  seg.wait_all(seg.publish(), "test");
  for (int q = 0; q < seg.size(); ++q) {
    for (int b = 0; b < 2; ++b) {
      const auto* in = reinterpret_cast<const unsigned char*>(seg.workspace_in(q, b));
      const auto* out = reinterpret_cast<const unsigned char*>(seg.workspace_out(q, b));
      EXPECT_EQ(in[0], 10 * q + b);
      EXPECT_EQ(in[seg.workspace_bytes() - 1], 10 * q + b);
      EXPECT_EQ(out[0], 10 * q + b + 5);
      EXPECT_EQ(out[seg.workspace_bytes() - 1], 10 * q + b + 5);
    }
  }
  seg.wait_all(seg.publish(), "test");  // nobody rewrites before every peer has read
}

TEST_F(ShmSegmentTest, SequenceNumbersOrderWritesAcrossRanks) {
  // Round k: rank (k mod n) writes k into its workspace, everyone publishes and waits, then
  // everyone reads k there. A missing acquire/release pairing or a wait returning early shows
  // up as a stale value.
  ShmSegment seg(node_.get());
  for (std::uint64_t k = 1; k <= 2000; ++k) {
    const int writer = static_cast<int>(k % static_cast<std::uint64_t>(seg.size()));
    const int b = seg.next_buffer();
    if (seg.rank() == writer) std::memcpy(seg.workspace_in(writer, b), &k, sizeof k);
    EXPECT_EQ(seg.next_sequence(), k);
    seg.wait_all(seg.publish(), "test");
    std::uint64_t seen = 0;
    std::memcpy(&seen, seg.workspace_in(writer, b), sizeof seen);
    ASSERT_EQ(seen, k);
  }
}

TEST_F(ShmSegmentTest, ArenaGivesTheSameOffsetOnEveryRank) {
  ShmSegment seg(node_.get());
  EXPECT_TRUE(seg.allocate(0).bytes().empty());
  const SharedBuffer a_buffer = seg.allocate(1000);
  const SharedBuffer b_buffer = seg.allocate(3 * 4096 + 1);
  const std::span<std::byte> a = a_buffer.bytes();
  const std::span<std::byte> b = b_buffer.bytes();
  ASSERT_EQ(a.size(), 1024u);  // rounded up to whole cache lines
  ASSERT_EQ(b.size(), 3u * 4096 + 64);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
  EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; }));

  const auto off_a = seg.arena_offset(a.data(), a.size());
  const auto off_b5 = seg.arena_offset(b.data() + 5, b.size() - 5);
  ASSERT_TRUE(off_a.has_value());
  ASSERT_TRUE(off_b5.has_value());
  EXPECT_EQ(test::gather_all(node_, *off_a), std::vector<std::uint64_t>(seg.size(), *off_a));
  EXPECT_EQ(test::gather_all(node_, *off_b5), std::vector<std::uint64_t>(seg.size(), *off_b5));
  EXPECT_TRUE(seg.owns(a.data()));
  EXPECT_TRUE(seg.owns(b.data() + b.size() - 1));
  EXPECT_FALSE(seg.arena_offset(a.data(), a.size() + 4096 + 1).has_value());  // runs past it
  const std::vector<std::byte> outside(16);
  EXPECT_FALSE(seg.owns(outside.data()));
  EXPECT_FALSE(seg.owns(seg.workspace_in(seg.rank(), 0)));

  // Each rank stamps its buffers; every peer finds the stamps at the same offsets.
  std::memset(a.data(), 1 + seg.rank(), a.size());
  std::memset(b.data(), 100 + seg.rank(), b.size());
  seg.wait_all(seg.publish(), "test");
  for (int q = 0; q < seg.size(); ++q) {
    const std::byte* pa = seg.peer_address(q, *off_a);
    const std::byte* pb = seg.peer_address(q, *off_b5);
    ASSERT_NE(pa, nullptr);
    ASSERT_NE(pb, nullptr);
    EXPECT_EQ(pa[a.size() - 1], std::byte(1 + q));
    EXPECT_EQ(pb[0], std::byte(100 + q));
    EXPECT_EQ(pb[b.size() - 6], std::byte(100 + q));
  }
  seg.wait_all(seg.publish(), "test");
}

TEST_F(ShmSegmentTest, ArenaFreesWhatEveryRankReleasedAtTheNextAllocation) {
  // Sizes in pages (4096 bytes) of this rank's part: a 1, b 4, c 2, d 1.
  constexpr std::size_t kPage = 4096;
  ShmSegment seg(node_.get());
  SharedBuffer a = seg.allocate(1000);
  SharedBuffer b = seg.allocate(3 * kPage + 1);
  EXPECT_EQ(seg.arena_bytes(), 5 * kPage);
  std::byte* const old_a = a.bytes().data();
  const auto off_a = seg.arena_offset(old_a, a.bytes().size());
  const auto off_b = seg.arena_offset(b.bytes().data(), b.bytes().size());
  ASSERT_TRUE(off_a.has_value());
  ASSERT_TRUE(off_b.has_value());
  std::memset(old_a, 0xff, a.bytes().size());
  a.reset();
  EXPECT_TRUE(a.bytes().empty());
  EXPECT_EQ(seg.arena_bytes(), 5 * kPage);  // released, not freed: no MPI call in reset()

  // Every rank released a: the next allocation frees it, whatever its size.
  const SharedBuffer c = seg.allocate(2 * kPage);
  EXPECT_EQ(seg.arena_bytes(), 6 * kPage);
  // a's offsets name nothing any more (c may be mapped at a's old address: offsets, not
  // addresses, are what is never reused).
  for (int q = 0; q < seg.size(); ++q) EXPECT_EQ(seg.peer_address(q, *off_a), nullptr);
  EXPECT_TRUE(std::all_of(c.bytes().begin(), c.bytes().end(),
                          [](std::byte x) { return x == std::byte{0}; }));
  const auto off_c = seg.arena_offset(c.bytes().data(), c.bytes().size());
  ASSERT_TRUE(off_c.has_value());
  EXPECT_EQ(*off_c, *off_b + 4 * kPage);  // after b: a's offsets are never given again
  EXPECT_EQ(test::gather_all(node_, *off_c), std::vector<std::uint64_t>(seg.size(), *off_c));
  std::memset(c.bytes().data(), 7 + seg.rank(), c.bytes().size());
  seg.wait_all(seg.publish(), "test");
  for (int q = 0; q < seg.size(); ++q) {
    const std::byte* pc = seg.peer_address(q, *off_c);
    ASSERT_NE(pc, nullptr);
    EXPECT_EQ(pc[c.bytes().size() - 1], std::byte(7 + q));
  }
  seg.wait_all(seg.publish(), "test");

  // b released by rank 0 alone stays mapped (the others still use it) until all have.
  std::byte* const old_b = b.bytes().data();
  if (seg.rank() == 0) b.reset();
  SharedBuffer d = seg.allocate(64);
  EXPECT_EQ(seg.arena_bytes(), (seg.size() == 1 ? 3 : 7) * kPage);
  EXPECT_EQ(seg.owns(old_b), seg.size() > 1);
  b.reset();
  d = SharedBuffer();  // a move-assignment releases what the handle held
  EXPECT_TRUE(seg.allocate(0).bytes().empty());  // frees, allocates nothing
  EXPECT_EQ(seg.arena_bytes(), 2 * kPage);
  EXPECT_TRUE(seg.owns(c.bytes().data()));
}

// Returns the CPU time this thread has used.
std::chrono::nanoseconds thread_cpu_time() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

TEST_F(ShmSegmentTest, AWaiterForALatePeerSleepsInsteadOfSpinning) {
  // Rank 0 arrives 300 ms late, computing meanwhile (as a rank still in backward would); every
  // other rank waits for it and must leave its core to others: less than a tenth of the wait
  // in CPU time (a spinning or yielding waiter uses all of it).
  using Clock = std::chrono::steady_clock;
  ShmSegment seg(node_.get());
  MPI_Barrier(node_.get());
  const Clock::time_point start = Clock::now();
  const std::chrono::nanoseconds cpu_before = thread_cpu_time();
  if (seg.rank() == 0) {
    volatile std::uint64_t work = 0;
    while (Clock::now() - start < std::chrono::milliseconds(300)) work = work + 1;
  }
  seg.wait_all(seg.publish(), "test");
  const auto waited = Clock::now() - start;
  const auto cpu = thread_cpu_time() - cpu_before;
  // Ranks leave the barrier a little apart: each waits most of rank 0's 300 ms.
  EXPECT_GE(waited, std::chrono::milliseconds(200));
  if (seg.rank() != 0) {
    EXPECT_LT(cpu, waited / 10) << "a waiter used " << cpu.count() / 1000 << " us of CPU in "
                                << waited.count() / 1000 << " us";
  }
  seg.wait_all(seg.publish(), "test");
}

TEST_F(ShmSegmentTest, ATimeoutNamesTheRanksThatDidNotArrive) {
  if (node_.size() == 1) {
    // Alone on the node nobody can be late: a bounded wait for oneself returns at once.
    ShmSegment seg(node_.get(),
                   ShmOptions{.workspace_bytes = 4096, .timeout = std::chrono::milliseconds(100)});
    seg.wait_all(seg.publish(), "shm_test");
    return;
  }
  // Rank 0 never joins the wait: every other rank must give up after the timeout, naming it.
  ShmSegment seg(node_.get(),
                 ShmOptions{.workspace_bytes = 4096, .timeout = std::chrono::milliseconds(300)});
  MPI_Comm others = MPI_COMM_NULL;
  MPI_Comm_split(node_.get(), seg.rank() == 0 ? MPI_UNDEFINED : 1, 0, &others);
  if (seg.rank() != 0) {
    const std::uint64_t sequence = seg.publish();
    MPI_Barrier(others);  // every rank but 0 has published before any of them times out
    MPI_Comm_free(&others);
    try {
      seg.wait_all(sequence, "shm_test_collective");
      ADD_FAILURE() << "the wait returned although rank 0 never published";
    } catch (const ShmTimeout& e) {
      EXPECT_EQ(e.missing_ranks(), std::vector<int>{0});
      const std::string what = e.what();
      EXPECT_NE(what.find("shm_test_collective"), std::string::npos) << what;
      EXPECT_NE(what.find("node rank " + std::to_string(seg.rank())), std::string::npos) << what;
      EXPECT_NE(what.find("sequence number 1"), std::string::npos) << what;
      EXPECT_NE(what.find("node rank(s) 0 did not arrive"), std::string::npos) << what;
    }
    EXPECT_THROW(seg.require_usable("next"), std::logic_error);
  }
  // The segment's destructor (collective) ends the test on every rank together.
}

}  // namespace
}  // namespace mpitrain
