// Allreduce of fp32 data with a 16-bit wire format (Communicator::allreduce(std::span<float>,
// op, wire, algo), the fused ring of wire_ring_allreduce.cpp and the MPI path):
// - closed form: inputs that are small integers times (1 + 2^-12) round to those integers in
//   bf16 and f16, so every algorithm must give exactly the 16-bit result for the integers
//   (which differs from the fp32 sum of the inputs);
// - bit for bit what converting to the wire type, running the 16-bit allreduce with the same
//   algorithm and converting back gives, on inexact data with infinities, NaNs and float16
//   overflow, for every op, counts 0, 1, fewer than the ranks, uneven chunks, chunks of many
//   segments and chunks whose segment counts differ;
// - one rounding per combine, the f32 wire, argument errors, and the collective count.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "collective_values.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/collectives/detail/ring_schedule.hpp"

namespace mpitrain {
namespace {

using test::describe;

constexpr DType kWires[] = {DType::bf16, DType::f16};
constexpr std::string_view kAlgos[] = {std::string_view("ring"), std::string_view("mpi"),
                                         kDefaultAlgorithm};

std::uint16_t narrow(DType wire, float x) {
  return wire == DType::bf16 ? to_bfloat16(x).bits : to_float16(x).bits;
}
float widen(DType wire, std::uint16_t h) {
  return wire == DType::bf16 ? to_float(bfloat16::from_bits(h)) : to_float(float16::from_bits(h));
}

// Rank r's input at i: the collectives tests' small integer times (1 + 2^-12). fp32 holds it
// exactly; bf16 and f16 round it back to the integer (2^-12 of |v| <= 3 is below half an ulp).
float exact_after_rounding(int rank, std::size_t i) {
  return static_cast<float>(test::value(DType::f32, rank, i)) * (1.0f + 0x1p-12f);
}

// Rank r's input at i: values that bf16 and f16 round (most are not representable), a few of
// them above float16's range (sums overflow), +inf on rank 0 and a NaN on the last rank at
// some indices (never two NaNs on one index: IEEE leaves the payload of NaN + NaN open).
float inexact(int rank, int size, std::size_t i) {
  if (i % 97 == 3) return 40000.0f + static_cast<float>(rank);
  if (rank == 0 && i % 101 == 5) return std::numeric_limits<float>::infinity();
  if (rank == size - 1 && i % 103 == 7) return std::bit_cast<float>(0x7fa12345u);  // signalling
  const std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u +
                          static_cast<std::uint32_t>(rank) * 40503u;
  return (static_cast<float>(h % 20001u) - 10000.0f) * 0.0013f;
}

class WireRingAllreduceTest : public ::testing::Test {
 protected:
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  std::size_t n() const { return static_cast<std::size_t>(comm_.size()); }
  // Elements per message of the fused ring.
  static constexpr std::size_t kSeg = detail::kRingSegmentBytes / 2;

  // Returns what converting x to `wire`, allreducing the 16-bit buffer with `algo` and
  // converting back gives (scalar conversions of precision/).
  std::vector<float> reference(std::vector<float> x, ReduceOp op, DType wire,
                               std::string_view algo) const {
    std::vector<std::uint16_t> w(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) w[i] = narrow(wire, x[i]);
    comm_.allreduce(w.data(), w.data(), w.size(), wire, op, algo);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = widen(wire, w[i]);
    return x;
  }

  // Returns the algorithm a 16-bit allreduce must use to give the fused call's result.
  std::string_view resolved(std::string_view algo, std::size_t count, DType wire,
                              ReduceOp op) const {
    return algo == kDefaultAlgorithm
               ? comm_.default_wire_allreduce_algorithm(count, wire, op)
               : algo;
  }

  // Runs the fused allreduce on x and checks it bit for bit against the reference, and
  // across ranks.
  void check_against_reference(const std::vector<float>& x, ReduceOp op, DType wire,
                               std::string_view algo) {
    SCOPED_TRACE(describe(wire, op, x.size()) + " algo " + std::string(algo));
    const std::vector<float> expected = reference(x, op, wire, resolved(algo, x.size(), wire, op));
    std::vector<float> got = x;
    comm_.allreduce(std::span<float>(got), op, wire, algo);
    std::size_t differ = 0;
    std::size_t first = got.size();
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(expected[i])) {
        if (differ++ == 0) first = i;
      }
    }
    EXPECT_EQ(differ, 0u) << "first at " << first << ": " << (first < got.size() ? got[first] : 0)
                          << " instead of " << (first < got.size() ? expected[first] : 0);
    EXPECT_TRUE(test::identical_on_all_ranks(comm_, got.data(), got.size() * sizeof(float)));
  }

  std::vector<float> inexact_inputs(std::size_t count) const {
    std::vector<float> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = inexact(rank(), size(), i);
    return x;
  }

  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(WireRingAllreduceTest, InputsAreRoundedBeforeTheyTravel) {
  for (DType wire : kWires) {
    for (ReduceOp op : test::kAllOps) {
      for (std::string_view algo : kAlgos) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, n() - 1, n(), n() + 1,
                                  2 * n() + 1, std::size_t{1001}, 3 * kSeg + 7}) {
          SCOPED_TRACE(describe(wire, op, count) + " algo " + std::string(algo));
          std::vector<float> x(count);
          for (std::size_t i = 0; i < count; ++i) x[i] = exact_after_rounding(rank(), i);
          comm_.allreduce(std::span<float>(x), op, wire, algo);
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < count; ++i) {
            wrong += x[i] != static_cast<float>(test::expected(wire, op, size(), i));
          }
          EXPECT_EQ(wrong, 0u);
          EXPECT_TRUE(test::identical_on_all_ranks(comm_, x.data(), x.size() * sizeof(float)));
        }
      }
    }
  }
}

TEST_F(WireRingAllreduceTest, SameBitsAsConvertAllreduceConvert) {
  for (DType wire : kWires) {
    for (ReduceOp op : test::kAllOps) {
      for (std::string_view algo : kAlgos) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, n() - 1, n() + 1, 2 * n() + 1,
                                  std::size_t{1001}, std::size_t{77777}}) {
          check_against_reference(inexact_inputs(count), op, wire, algo);
        }
      }
    }
  }
}

TEST_F(WireRingAllreduceTest, ChunksOfManySegments) {
  // Chunks of more than kRingSlots + 1 segments plus a short one (receives re-posted, the
  // last segment short); and chunks of exactly 2 segments but one element more on rank 0's
  // chunk, whose extra one-element segment is sent after every segment was received.
  for (DType wire : kWires) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      check_against_reference(inexact_inputs((4 * kSeg + 5) * n() + 3), op, wire,
                              "ring");
      check_against_reference(inexact_inputs(2 * kSeg * n() + 1), op, wire,
                              "ring");
    }
    check_against_reference(inexact_inputs(kSeg * n() - 1), ReduceOp::max, wire,
                            "ring");
  }
}

TEST_F(WireRingAllreduceTest, RoundsOncePerCombine) {
  // Ranks 0 and 1 hold a and b, the others zeros, so the result is
  // round(float(round(a)) + float(round(b))) whatever the ring's order: a and b are rounded
  // first (1 + 2^-9 is 1 in bf16), and their sum rounds again (in bf16, 1 + 2^-8 ties to even
  // 1 and 1 + 3 * 2^-8 to 1 + 2^-6; in f16, 60000 + 60000 overflows to inf).
  const std::vector<float> a = {1.0f + 0x1p-9f, 1.0f, 1.0f, 60000.0f, -3.5f, 0x1p-20f};
  const std::vector<float> b = {0.0f, 0x1p-8f, 0x3p-8f, 60000.0f, 0.25f + 0x1p-13f, 0x1p-20f};
  for (DType wire : kWires) {
    for (std::string_view algo : kAlgos) {
      SCOPED_TRACE(std::string(to_string(wire)) + " " + std::string(algo));
      std::vector<float> x(a.size(), 0.0f);
      if (rank() < 2) x = rank() == 0 ? a : b;
      comm_.allreduce(std::span<float>(x), ReduceOp::sum, wire, algo);
      for (std::size_t i = 0; i < a.size(); ++i) {
        const float ra = widen(wire, narrow(wire, a[i]));
        const float rb = size() > 1 ? widen(wire, narrow(wire, b[i])) : 0.0f;
        EXPECT_EQ(std::bit_cast<std::uint32_t>(x[i]),
                  std::bit_cast<std::uint32_t>(widen(wire, narrow(wire, ra + rb))))
            << i;
      }
      EXPECT_EQ(x[0], wire == DType::bf16 ? 1.0f : 1.0f + 0x1p-9f);  // f16 holds 1 + 2^-9
      if (size() > 1 && wire == DType::bf16) {
        EXPECT_EQ(x[1], 1.0f);
        EXPECT_EQ(x[2], 1.0f + 0x1p-6f);
      }
      if (size() > 1 && wire == DType::f16) {
        EXPECT_TRUE(std::isinf(x[3]));
      }
    }
  }
}

TEST_F(WireRingAllreduceTest, ScratchGivenOrNot) {
  // A caller's scratch (longer than needed) gives the same bits as the call's own.
  const std::size_t count = 2 * kSeg + 11;
  for (DType wire : kWires) {
    std::vector<float> own = inexact_inputs(count);
    std::vector<float> given = own;
    std::vector<std::uint16_t> scratch(count + 5, 0xA5A5);
    comm_.allreduce(std::span<float>(own), ReduceOp::sum, wire, "ring");
    comm_.allreduce(std::span<float>(given), ReduceOp::sum, wire, "ring",
                    std::span<std::uint16_t>(scratch));
    EXPECT_EQ(std::memcmp(own.data(), given.data(), count * sizeof(float)), 0) << to_string(wire);
  }
}

TEST_F(WireRingAllreduceTest, FloatWireIsThePlainAllreduce) {
  const std::size_t count = 1001;
  for (ReduceOp op : test::kAllOps) {
    std::vector<float> x = inexact_inputs(count);
    std::vector<float> plain = x;
    comm_.allreduce(std::span<float>(x), op, DType::f32, kDefaultAlgorithm);
    comm_.allreduce(std::span<float>(plain), op, kDefaultAlgorithm);
    EXPECT_EQ(std::memcmp(x.data(), plain.data(), count * sizeof(float)), 0) << to_string(op);
  }
}

TEST_F(WireRingAllreduceTest, OneCollectivePerCallAndArgumentErrors) {
  std::vector<float> x(100, 1.0f);
  for (std::string_view algo : kAlgos) {
    const std::uint64_t before = comm_.collectives_issued();
    comm_.allreduce(std::span<float>(x), ReduceOp::sum, DType::bf16, algo);
    comm_.allreduce(std::span<float>(x.data(), 0), ReduceOp::sum, DType::f16, algo);
    EXPECT_EQ(comm_.collectives_issued() - before, 2u) << algo;
  }
  std::vector<std::uint16_t> short_scratch(99);
  EXPECT_THROW(comm_.allreduce(std::span<float>(x), ReduceOp::sum, DType::bf16,
                               "ring", std::span<std::uint16_t>(short_scratch)),
               std::invalid_argument);
  EXPECT_THROW(comm_.allreduce(std::span<float>(x), ReduceOp::sum, DType::i32),
               std::invalid_argument);
}

TEST_F(WireRingAllreduceTest, DefaultRule) {
  // Never default_; f32 follows the plain rule; one rank uses MPI.
  for (DType wire : kWires) {
    for (ReduceOp op : test::kAllOps) {
      for (std::size_t count : {std::size_t{1}, std::size_t{1} << 12, std::size_t{1} << 21}) {
        const std::string_view a = comm_.default_wire_allreduce_algorithm(count, wire, op);
        EXPECT_NE(a, kDefaultAlgorithm);
        if (size() == 1) {
          EXPECT_EQ(a, "mpi");
        }
      }
    }
  }
  EXPECT_EQ(comm_.default_wire_allreduce_algorithm(1 << 20, DType::f32, ReduceOp::sum),
            comm_.default_allreduce_algorithm(1 << 20, DType::f32, ReduceOp::sum));
  if (size() == 2 && comm_.node_count() == 1) {
    // 4 MiB of bf16: the 16-bit default runs shared memory there, fp32 data runs the fused
    // ring (shm_wire_allreduce's conversions are not in the table yet; MPI would need two
    // conversion passes); 1 KiB of fp32 data on a 16-bit wire runs MPI.
    EXPECT_EQ(comm_.default_allreduce_algorithm(1 << 21, DType::bf16, ReduceOp::sum),
              "shm");
    EXPECT_EQ(comm_.default_wire_allreduce_algorithm(1 << 21, DType::bf16, ReduceOp::sum),
              "ring");
    EXPECT_EQ(comm_.default_wire_allreduce_algorithm(512, DType::bf16, ReduceOp::sum),
              "mpi");
  }
}

}  // namespace
}  // namespace mpitrain
