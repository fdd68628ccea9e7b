// Ring allreduce (through Communicator::allreduce with algorithm "ring"): chunks
// smaller than the world, uneven chunks, chunks spanning many pipelined segments, every type
// and op, in place and out of place, bitwise identical on every rank, and the rounding of
// 16-bit sums and averages.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "allreduce_check.hpp"
#include "collective_values.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/collectives/detail/ring_allreduce.hpp"

namespace mpitrain {
namespace {

using test::Buffer;
using test::describe;
using test::inputs;
using test::kAllOps;
using test::kAllTypes;

class RingAllreduceTest : public ::testing::Test {
 protected:
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  std::size_t n() const { return static_cast<std::size_t>(comm_.size()); }

  void check_ring(DType t, ReduceOp op, std::size_t count) {
    test::check_allreduce(comm_, "ring", t, op, count);
  }

  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(RingAllreduceTest, CountsAroundTheWorldSize) {
  // 0, fewer elements than ranks (empty chunks), exactly one per rank, uneven chunks.
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, n() - 1, n(), n() + 1,
                                2 * n() + 1, std::size_t{1001}}) {
        check_ring(t, op, count);
      }
    }
  }
}

TEST_F(RingAllreduceTest, ChunksSpanningManySegments) {
  // Each chunk holds more than four segments plus a partial one, so the receive slots are
  // reused and the last segment is short.
  for (DType t : kAllTypes) {
    const std::size_t seg = detail::kRingSegmentBytes / dtype_bytes(t);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      check_ring(t, op, (4 * seg + 5) * n() + 3);
    }
    check_ring(t, ReduceOp::min, seg * n() - 1);  // each chunk about one segment
  }
}

TEST_F(RingAllreduceTest, SameResultAsMpiForExactData) {
  for (DType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      const std::size_t count = 77777;
      SCOPED_TRACE(describe(t, op, count));
      const Buffer send = inputs(t, rank(), count);
      Buffer ring(count, t);
      Buffer mpi(count, t);
      comm_.allreduce(send.data(), ring.data(), count, t, op, "ring");
      comm_.allreduce(send.data(), mpi.data(), count, t, op, "mpi");
      EXPECT_EQ(ring.bytes, mpi.bytes);
    }
  }
}

TEST_F(RingAllreduceTest, HalfPrecisionRoundsOncePerCombine) {
  // Ranks 0 and 1 hold a and b, the others zeros (adding +0 is exact), so whatever the ring's
  // order the result is round(fp32(a) + fp32(b)): including sums that are not representable
  // (in bf16, 1 + 2^-8 ties to even 1 and 1 + 3 * 2^-8 ties to even 1 + 2^-6) and float16 overflow to
  // inf (60000 + 60000).
  const std::vector<float> a = {1.0f, 1.0f, 60000.0f, -3.5f, 0x1p-20f};
  const std::vector<float> b = {0x1p-8f, 0x3p-8f, 60000.0f, 0.25f, 0x1p-20f};
  std::vector<bfloat16> xb(a.size(), to_bfloat16(0.0f));
  std::vector<float16> xh(a.size(), to_float16(0.0f));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (rank() < 2) {
      xb[i] = to_bfloat16(rank() == 0 ? a[i] : b[i]);
      xh[i] = to_float16(rank() == 0 ? a[i] : b[i]);
    }
  }
  comm_.allreduce<bfloat16>(xb, ReduceOp::sum, "ring");
  comm_.allreduce<float16>(xh, ReduceOp::sum, "ring");
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float bb = size() > 1 ? to_float(to_bfloat16(b[i])) : 0.0f;
    const float hb = size() > 1 ? to_float(to_float16(b[i])) : 0.0f;
    EXPECT_EQ(xb[i], to_bfloat16(to_float(to_bfloat16(a[i])) + bb)) << i;
    EXPECT_EQ(xh[i], to_float16(to_float(to_float16(a[i])) + hb)) << i;
  }
  if (size() > 1) {
    EXPECT_EQ(to_float(xb[0]), 1.0f);
    EXPECT_EQ(to_float(xb[1]), 1.0f + 0x1p-6f);
    EXPECT_TRUE(std::isinf(to_float(xh[2])));
  }
}

}  // namespace
}  // namespace mpitrain
