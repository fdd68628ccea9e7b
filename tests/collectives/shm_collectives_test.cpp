// Shared-memory collectives over a ShmSegment with small workspaces (so that most calls run
// in several pieces): closed-form values for every op, type and awkward count, bitwise
// identical results on every rank, the documented rank-order reduction, the fused wire
// allreduce, the zero-copy paths (allreduce, reduce_scatter, allgather), the finiteness
// answer of the in-place allreduce, and thousands of back-to-back calls of random shapes.

#include "mpitrain/collectives/detail/shm_collectives.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "mpitrain/collectives/detail/reduce_kernels.hpp"
#include "shm_test_support.hpp"

namespace mpitrain {
namespace {

using detail::ShmOptions;
using detail::ShmSegment;
using test::Buffer;
using test::describe;
using test::inputs;
using test::kAllOps;
using test::kAllTypes;
using test::mismatches;

// Copies `bytes` bytes; count-0 buffers are empty vectors whose data() may be null, which
// memcpy must never be given (UBSan's nonnull check), so nothing is copied then.
void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
// Returns memcmp's verdict on `bytes` bytes, 0 for none (for the same reason).
int compare_bytes(const void* a, const void* b, std::size_t bytes) {
  return bytes > 0 ? std::memcmp(a, b, bytes) : 0;
}

// Bytes of input per workspace: a piece holds 4096 / dtype_bytes elements.
constexpr std::size_t kWorkspaceBytes = 4096;

// Parameter: ShmOptions::symmetric_bytes. 0 runs every allreduce piece slice by slice
// (distributed); SIZE_MAX runs every piece that may be symmetric symmetrically.
// (symmetric_max_ranks 0: the size rule alone decides.)
class ShmCollectivesTest : public ::testing::TestWithParam<std::size_t> {
 protected:
  int rank() const { return seg_.rank(); }
  int size() const { return seg_.size(); }
  std::size_t n() const { return static_cast<std::size_t>(seg_.size()); }

  // Counts around the world size, odd, and spanning several pieces with a short last one.
  std::vector<std::size_t> counts(DType t) const {
    const std::size_t piece = kWorkspaceBytes / dtype_bytes(t);
    return {0, 1, n() - 1, n() + 1, 1001, 3 * piece + 7};
  }

  bool identical(const Buffer& b) const {
    return test::identical_on_node(node_, b.data(), b.bytes.size());
  }

  // Runs shm_allreduce out of place from a span starting `shift` elements into its storage,
  // then in place; checks the closed form, in place == out of place, and identity on the node.
  void check_allreduce(DType t, ReduceOp op, std::size_t count, std::size_t shift) {
    SCOPED_TRACE(describe(t, op, count) + " shift " + std::to_string(shift));
    const std::size_t eb = dtype_bytes(t);
    const Buffer in = inputs(t, rank(), count);
    Buffer send(count + shift, t);
    copy_bytes(send.bytes.data() + shift * eb, in.data(), in.bytes.size());
    Buffer out(count, t);
    out.poison();
    detail::shm_allreduce(seg_, send.bytes.data() + shift * eb, out.data(), count, t, op);
    EXPECT_EQ(mismatches(out, op, size()), 0u);
    EXPECT_TRUE(identical(out));
    detail::shm_allreduce(seg_, send.bytes.data() + shift * eb, send.bytes.data() + shift * eb,
                          count, t, op);
    EXPECT_EQ(compare_bytes(send.bytes.data() + shift * eb, out.data(), out.bytes.size()), 0);
  }

  test::NodeComm node_;
  ShmSegment seg_{node_.get(),
                  ShmOptions{.workspace_bytes = kWorkspaceBytes,
                             .symmetric_max_ranks = 0,
                             .symmetric_bytes = GetParam()}};
};

TEST_P(ShmCollectivesTest, AllreduceClosedForm) {
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : counts(t)) {
        check_allreduce(t, op, count, 0);
        check_allreduce(t, op, count, 1);
      }
    }
  }
}

TEST_P(ShmCollectivesTest, ReduceScatterClosedForm) {
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t recv_count : counts(t)) {
        SCOPED_TRACE(describe(t, op, recv_count));
        const Buffer send = inputs(t, rank(), n() * recv_count);
        Buffer out(recv_count, t);
        out.poison();
        detail::shm_reduce_scatter(seg_, send.data(), out.data(), recv_count, t, op);
        // Block r holds the reduction of global indices [r recv_count, (r + 1) recv_count).
        EXPECT_EQ(mismatches(out, op, size(), static_cast<std::size_t>(rank()) * recv_count),
                  0u);
      }
    }
  }
}

TEST_P(ShmCollectivesTest, AllgatherClosedForm) {
  for (DType t : kAllTypes) {
    for (std::size_t send_count : counts(t)) {
      SCOPED_TRACE(describe(t, ReduceOp::sum, send_count));
      const std::size_t first = static_cast<std::size_t>(rank()) * send_count;
      const Buffer send = inputs(t, rank(), send_count, first);
      Buffer out(n() * send_count, t);
      out.poison();
      detail::shm_allgather(seg_, send.data(), out.data(), send_count, t);
      Buffer inplace(n() * send_count, t);
      inplace.poison();
      copy_bytes(inplace.bytes.data() + first * dtype_bytes(t), send.data(), send.bytes.size());
      detail::shm_allgather(seg_, inplace.bytes.data() + first * dtype_bytes(t), inplace.data(),
                            send_count, t);
      std::size_t wrong = 0;
      for (std::size_t j = 0; j < out.count; ++j) {
        wrong += out[j] != test::value(t, static_cast<int>(j / send_count), j);
      }
      EXPECT_EQ(wrong, 0u);
      EXPECT_EQ(inplace.bytes, out.bytes);
    }
  }
}

TEST_P(ShmCollectivesTest, BroadcastFromEveryRoot) {
  for (DType t : kAllTypes) {
    for (std::size_t count : counts(t)) {
      for (int root = 0; root < size(); ++root) {
        SCOPED_TRACE(describe(t, ReduceOp::sum, count) + " root " + std::to_string(root));
        Buffer data = inputs(t, rank(), count);
        if (rank() != root) data.poison();
        detail::shm_broadcast(seg_, data.data(), count, t, root);
        EXPECT_EQ(data.bytes, inputs(t, root, count).bytes);
      }
    }
  }
  Buffer data(1, DType::f32);
  EXPECT_THROW(detail::shm_broadcast(seg_, data.data(), 1, DType::f32, size()),
               std::invalid_argument);
}

// Returns rank r's value at i: magnitudes 2^-10 .. 2^13 of both signs, so that a sum's
// rounding depends on the order of its terms.
float spread_value(int r, std::size_t i) {
  const auto k = static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 5) % 24) - 10;
  const float sign = (i + static_cast<std::size_t>(r)) % 3 == 0 ? -1.0f : 1.0f;
  return sign * std::ldexp(1.0f + static_cast<float>((i + 3 * r) % 11) / 11.0f, k);
}

TEST_P(ShmCollectivesTest, SumsInRankOrder) {
  // f32: ((x0 + x1) + x2) + ...; bf16: the same with a rounding to bf16 at every combine;
  // avg divides the last combine by n (bf16: in fp32, one rounding).
  const std::size_t count = 3 * kWorkspaceBytes / 4 + 5;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    std::vector<float> f(count);
    std::vector<bfloat16> h(count);
    for (std::size_t i = 0; i < count; ++i) {
      f[i] = spread_value(rank(), i);
      h[i] = to_bfloat16(f[i]);
    }
    detail::shm_allreduce(seg_, f.data(), f.data(), count, DType::f32, op);
    detail::shm_allreduce(seg_, h.data(), h.data(), count, DType::bf16, op);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float acc = spread_value(0, i);
      float hacc = to_float(to_bfloat16(acc));
      for (int r = 1; r < size(); ++r) {
        const float x = spread_value(r, i);
        const bool last_avg = op == ReduceOp::avg && r == size() - 1;
        acc = last_avg ? (x + acc) / static_cast<float>(size()) : x + acc;
        const float hx = to_float(to_bfloat16(x)) + hacc;
        hacc = to_float(to_bfloat16(last_avg ? hx / static_cast<float>(size()) : hx));
      }
      wrong += compare_bytes(&acc, &f[i], sizeof acc) != 0;
      wrong += to_bfloat16(hacc).bits != h[i].bits;
    }
    EXPECT_EQ(wrong, 0u) << to_string(op);
  }
}

TEST_P(ShmCollectivesTest, WireAllreduceIsTheSixteenBitAllreduceConverted) {
  const std::size_t count = 5 * kWorkspaceBytes / 2 + 3;
  for (DType wire : {DType::bf16, DType::f16}) {
    for (ReduceOp op : kAllOps) {
      SCOPED_TRACE(describe(wire, op, count));
      std::vector<float> data(count);
      for (std::size_t i = 0; i < count; ++i) {
        data[i] = 100.0f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank()));
      }
      std::vector<std::uint16_t> half(count);
      detail::narrow_from_f32(data.data(), half.data(), count, wire, 1);
      detail::shm_allreduce(seg_, half.data(), half.data(), count, wire, op);
      std::vector<float> expected(count);
      detail::widen_to_f32(half.data(), expected.data(), count, wire);
      detail::shm_wire_allreduce(seg_, data.data(), count, wire, op);
      EXPECT_EQ(compare_bytes(data.data(), expected.data(), count * sizeof(float)), 0);
    }
  }
  std::vector<float> one(1);
  EXPECT_THROW(detail::shm_wire_allreduce(seg_, one.data(), 1, DType::f32, ReduceOp::sum),
               std::invalid_argument);
}

TEST_P(ShmCollectivesTest, ZeroCopyFromTheArenaGivesTheSameResults) {
  // In place and out of place from arena buffers, on every rank or only on even ranks (ranks
  // mix zero copy and copy-in), at an element offset into the allocation.
  for (DType t : {DType::f32, DType::bf16, DType::f64, DType::u8}) {
    const std::size_t eb = dtype_bytes(t);
    const std::size_t count = 4 * kWorkspaceBytes / eb + 9;
    const SharedBuffer arena_buffer = seg_.allocate((count + 1) * eb);
    const std::span<std::byte> arena = arena_buffer.bytes();
    for (ReduceOp op : kAllOps) {
      for (bool only_even : {false, true}) {
        SCOPED_TRACE(describe(t, op, count) + (only_even ? " even ranks" : " all ranks"));
        const bool mine_in_arena = !only_even || rank() % 2 == 0;
        const Buffer in = inputs(t, rank(), count);
        Buffer plain(count, t);
        std::byte* send = mine_in_arena ? arena.data() + eb : plain.bytes.data();
        copy_bytes(send, in.data(), in.bytes.size());
        Buffer out(count, t);
        out.poison();
        detail::shm_allreduce(seg_, send, out.data(), count, t, op);
        EXPECT_EQ(mismatches(out, op, size()), 0u);
        EXPECT_TRUE(identical(out));
        detail::shm_allreduce(seg_, send, send, count, t, op);
        EXPECT_EQ(compare_bytes(send, out.data(), out.bytes.size()), 0);
      }
    }
  }
}

TEST_P(ShmCollectivesTest, SmallArenaAllreducesAreCopiedInWithOneSynchronisation) {
  // Below 2 KiB an arena input is copied in all the same (one synchronisation per piece, or
  // two when the piece goes slice by slice); from 2 KiB up it is read in place, with two
  // synchronisations in all whatever the size. One rank synchronises nothing.
  const std::size_t small = (std::size_t{2} << 10) / sizeof(float) - 1;
  const std::size_t large = small + 1;
  const SharedBuffer arena_buffer = seg_.allocate(large * sizeof(float));
  const std::span<std::byte> arena = arena_buffer.bytes();
  for (std::size_t count : {small, large}) {
    SCOPED_TRACE(describe(DType::f32, ReduceOp::sum, count));
    const Buffer in = inputs(DType::f32, rank(), count);
    copy_bytes(arena.data(), in.data(), in.bytes.size());
    const std::uint64_t before = seg_.next_sequence();
    detail::shm_allreduce(seg_, arena.data(), arena.data(), count, DType::f32, ReduceOp::sum);
    std::uint64_t copy_path = 0;
    for (std::size_t first = 0; first < count; first += kWorkspaceBytes / sizeof(float)) {
      const std::size_t piece_bytes = std::min(kWorkspaceBytes, (count - first) * sizeof(float));
      copy_path += seg_.symmetric(piece_bytes) ? 1 : 2;
    }
    const std::uint64_t expected = size() == 1 ? 0 : count == small ? copy_path : 2;
    EXPECT_EQ(seg_.next_sequence() - before, expected);
    Buffer out(count, DType::f32);
    copy_bytes(out.data(), arena.data(), out.bytes.size());
    EXPECT_EQ(mismatches(out, ReduceOp::sum, size()), 0u);
    EXPECT_TRUE(identical(out));
  }
}

TEST_P(ShmCollectivesTest, InPlaceArenaAllreduceSaysWhetherTheResultIsFinite) {
  // The whole-buffer path (f32, in place, every rank's buffer in the arena) checks the slices
  // each rank combined, and every rank gets the same answer: also for an inf or NaN that one
  // rank alone holds, wherever it lies (in any rank's slice), and for finite values whose sum
  // overflows. Every other path leaves the answer unset, as does one rank (nothing combined).
  const std::size_t count = 3 * kWorkspaceBytes / sizeof(float) + 7;  // several chunks
  const SharedBuffer arena_buffer = seg_.allocate((count + 1) * sizeof(float));
  const std::span<std::byte> arena = arena_buffer.bytes();
  auto* data = reinterpret_cast<float*>(arena.data());
  // Returns the answer of an in-place allreduce of `buffer` (count values, set to 1..7 and
  // then changed by `poke`) as 0 unset, 1 finite, 2 not finite, after checking that every
  // rank got the same.
  auto answer = [&](float* buffer, std::size_t values, auto&& poke) {
    for (std::size_t i = 0; i < values; ++i) buffer[i] = 1.0f + static_cast<float>(i % 7);
    poke(buffer);
    std::optional<bool> finite;
    detail::shm_allreduce(seg_, buffer, buffer, values, DType::f32, ReduceOp::sum, &finite);
    const std::uint64_t code = finite.has_value() ? (*finite ? 1 : 2) : 0;
    const std::vector<std::uint64_t> all = test::gather_all(node_, code);
    EXPECT_TRUE(std::all_of(all.begin(), all.end(), [&](std::uint64_t c) { return c == code; }));
    return code;
  };
  const std::uint64_t reported = size() == 1 ? 0 : 1;
  const std::uint64_t not_finite = size() == 1 ? 0 : 2;
  EXPECT_EQ(answer(data, count, [](float*) {}), reported);
  const float kInf = std::numeric_limits<float>::infinity();
  // Positions every count / (2 n) values: at least one in every rank's slice (each about
  // count / n long), the first and the last value too.
  const float bad[] = {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
  std::vector<std::size_t> positions;
  for (std::size_t at = 0; at < count; at += count / (2 * n())) positions.push_back(at);
  positions.push_back(count - 1);
  for (int holder = 0; holder < size(); ++holder) {
    for (std::size_t j = 0; j < positions.size(); ++j) {
      const std::size_t at = positions[j];
      const float value = bad[j % std::size(bad)];
      SCOPED_TRACE("rank " + std::to_string(holder) + " holds " + std::to_string(value) +
                   " at " + std::to_string(at));
      EXPECT_EQ(answer(data, count, [&](float* b) { if (rank() == holder) b[at] = value; }),
                not_finite);
    }
  }
  EXPECT_EQ(answer(data, count, [](float*) {}), reported) << "finite again after an inf";
  EXPECT_EQ(answer(data, count, [&](float* b) { b[count / 3] = std::numeric_limits<float>::max(); }),
            not_finite)
      << "max + max overflows to inf";
  // Paths that do not look: in place outside the arena, below the zero-copy size, out of
  // place, another type.
  std::vector<float> plain(count);
  EXPECT_EQ(answer(plain.data(), count, [](float*) {}), 0u);
  EXPECT_EQ(answer(data, (std::size_t{2} << 10) / sizeof(float) - 1, [](float*) {}), 0u);
  std::optional<bool> finite;
  detail::shm_allreduce(seg_, data, plain.data(), count, DType::f32, ReduceOp::sum, &finite);
  EXPECT_FALSE(finite.has_value());
  detail::shm_allreduce(seg_, data, data, count / 2, DType::f64, ReduceOp::sum, &finite);
  EXPECT_FALSE(finite.has_value());
}

TEST_P(ShmCollectivesTest, ZeroCopyReduceScatterFromTheArenaGivesTheSameResults) {
  // Sends in the arena on every rank (the whole-buffer path) or only on even ranks (ranks mix
  // zero copy and copy-in, piece by piece), at an element offset into the allocation: closed
  // form, bitwise equal to the copy path, the send unchanged.
  for (DType t : kAllTypes) {
    const std::size_t eb = dtype_bytes(t);
    const std::size_t most = counts(t).back();
    const SharedBuffer arena_buffer = seg_.allocate((n() * most + 1) * eb);
    const std::span<std::byte> arena = arena_buffer.bytes();
    for (ReduceOp op : kAllOps) {
      for (std::size_t recv_count : counts(t)) {
        for (bool only_even : {false, true}) {
          SCOPED_TRACE(describe(t, op, recv_count) + (only_even ? " even ranks" : " all ranks"));
          const Buffer in = inputs(t, rank(), n() * recv_count);
          Buffer copied(recv_count, t);
          copied.poison();
          detail::shm_reduce_scatter(seg_, in.data(), copied.data(), recv_count, t, op);
          Buffer plain(n() * recv_count, t);
          const bool mine_in_arena = !only_even || rank() % 2 == 0;
          std::byte* send = mine_in_arena ? arena.data() + eb : plain.bytes.data();
          copy_bytes(send, in.data(), in.bytes.size());
          Buffer out(recv_count, t);
          out.poison();
          const std::uint64_t before = seg_.next_sequence();
          detail::shm_reduce_scatter(seg_, send, out.data(), recv_count, t, op);
          if (size() > 1 && recv_count > 0 && !only_even) {
            // Every send in the arena: one synchronisation before reading, one after.
            EXPECT_EQ(seg_.next_sequence() - before, 2u);
          }
          EXPECT_EQ(mismatches(out, op, size(), static_cast<std::size_t>(rank()) * recv_count),
                    0u);
          EXPECT_EQ(out.bytes, copied.bytes);
          EXPECT_EQ(compare_bytes(send, in.data(), in.bytes.size()), 0);
        }
      }
    }
  }
}

TEST_P(ShmCollectivesTest, ZeroCopyAllgatherFromTheArenaGivesTheSameResults) {
  // In place in the arena on every rank (the whole-buffer path) or only on even ranks (mixed,
  // piece by piece), and out of place from an arena send: closed form, bitwise equal to the
  // copy path.
  for (DType t : kAllTypes) {
    const std::size_t eb = dtype_bytes(t);
    const SharedBuffer arena_buffer = seg_.allocate((n() * counts(t).back() + 1) * eb);
    const std::span<std::byte> arena = arena_buffer.bytes();
    for (std::size_t send_count : counts(t)) {
      for (bool only_even : {false, true}) {
        SCOPED_TRACE(describe(t, ReduceOp::sum, send_count) +
                     (only_even ? " even ranks" : " all ranks"));
        const std::size_t first = static_cast<std::size_t>(rank()) * send_count;
        const Buffer send = inputs(t, rank(), send_count, first);
        Buffer copied(n() * send_count, t);
        copied.poison();
        detail::shm_allgather(seg_, send.data(), copied.data(), send_count, t);
        const bool mine_in_arena = !only_even || rank() % 2 == 0;
        Buffer plain(n() * send_count, t);
        std::byte* recv = mine_in_arena ? arena.data() + eb : plain.bytes.data();
        std::fill_n(recv, plain.bytes.size(), std::byte{0xA5});
        copy_bytes(recv + first * eb, send.data(), send.bytes.size());
        const std::uint64_t before = seg_.next_sequence();
        detail::shm_allgather(seg_, recv + first * eb, recv, send_count, t);
        if (size() > 1 && send_count > 0 && !only_even) {
          // Every send in the arena: one synchronisation before reading, one after.
          EXPECT_EQ(seg_.next_sequence() - before, 2u);
        }
        std::size_t wrong = 0;
        for (std::size_t j = 0; j < copied.count; ++j) {
          wrong += copied[j] != test::value(t, static_cast<int>(j / send_count), j);
        }
        EXPECT_EQ(wrong, 0u);
        EXPECT_EQ(compare_bytes(recv, copied.data(), copied.bytes.size()), 0);
        Buffer out(n() * send_count, t);
        out.poison();
        copy_bytes(arena.data() + eb, send.data(), send.bytes.size());
        const std::byte* from = mine_in_arena ? arena.data() + eb : send.bytes.data();
        detail::shm_allgather(seg_, from, out.data(), send_count, t);
        EXPECT_EQ(out.bytes, copied.bytes);
      }
    }
  }
}

TEST_P(ShmCollectivesTest, ThousandsOfRandomCollectivesBackToBack) {
  // Allreduces, reduce-scatters and allgathers alternate at random between copy-in and zero
  // copy, decided per rank, so that consecutive calls of one kind and of the other follow
  // each other closely (and a rank rewrites its arena send right after a zero-copy call).
  std::mt19937_64 rng(20240613);  // the same sequence of calls on every rank
  const SharedBuffer arena_buffer = seg_.allocate(n() * 3000 * sizeof(double));
  const std::span<std::byte> arena = arena_buffer.bytes();
  std::size_t wrong = 0;
  for (int call = 0; call < 3000; ++call) {
    const DType t = kAllTypes[rng() % std::size(kAllTypes)];
    const ReduceOp op = kAllOps[rng() % std::size(kAllOps)];
    const std::size_t count = rng() % 4 == 0 ? rng() % 8 : rng() % 3000;
    const auto kind = rng() % 4;
    const auto root = static_cast<int>(rng() % n());
    const auto zero_copy_ranks = rng();
    if (kind == 0) {
      Buffer data = inputs(t, rank(), count);
      // Finite inputs: an answer, where a path gives one, is "finite".
      std::optional<bool> finite;
      if ((zero_copy_ranks >> rank()) & 1u) {
        copy_bytes(arena.data(), data.data(), data.bytes.size());
        detail::shm_allreduce(seg_, arena.data(), arena.data(), count, t, op, &finite);
        copy_bytes(data.data(), arena.data(), data.bytes.size());
      } else {
        detail::shm_allreduce(seg_, data.data(), data.data(), count, t, op, &finite);
      }
      wrong += finite.has_value() && !*finite;
      wrong += mismatches(data, op, size());
    } else if (kind == 1) {
      const Buffer send = inputs(t, rank(), n() * count);
      Buffer out(count, t);
      const void* from = send.data();
      if ((zero_copy_ranks >> rank()) & 1u) {
        copy_bytes(arena.data(), send.data(), send.bytes.size());
        from = arena.data();
      }
      detail::shm_reduce_scatter(seg_, from, out.data(), count, t, op);
      wrong += mismatches(out, op, size(), static_cast<std::size_t>(rank()) * count);
    } else if (kind == 2) {
      const std::size_t first = static_cast<std::size_t>(rank()) * count;
      const Buffer send = inputs(t, rank(), count, first);
      Buffer out(n() * count, t);
      if ((zero_copy_ranks >> rank()) & 1u) {  // in place in the arena
        std::byte* recv = arena.data();
        copy_bytes(recv + first * dtype_bytes(t), send.data(), send.bytes.size());
        detail::shm_allgather(seg_, recv + first * dtype_bytes(t), recv, count, t);
        copy_bytes(out.data(), recv, out.bytes.size());
      } else {
        detail::shm_allgather(seg_, send.data(), out.data(), count, t);
      }
      for (std::size_t j = 0; j < out.count; ++j) {
        wrong += out[j] != test::value(t, static_cast<int>(j / count), j);
      }
    } else {
      Buffer data = inputs(t, rank(), count);
      detail::shm_broadcast(seg_, data.data(), count, t, root);
      wrong += data.bytes != inputs(t, root, count).bytes;
    }
    ASSERT_EQ(wrong, 0u) << "call " << call << ": " << describe(t, op, count) << " kind "
                         << kind << " zero copy ranks " << (zero_copy_ranks & 15u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllreducePieces, ShmCollectivesTest,
                         ::testing::Values(std::size_t{0}, SIZE_MAX),
                         [](const auto& info) {
                           return info.param == 0 ? "Distributed" : "Symmetric";
                         });

}  // namespace
}  // namespace mpitrain
