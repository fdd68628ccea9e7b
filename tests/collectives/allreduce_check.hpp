#pragma once
// The check every allreduce algorithm's test runs: one named algorithm out of place and in
// place, on the closed-form inputs of collective_values.hpp.

#include <gtest/gtest.h>

#include <cstddef>
#include <string_view>

#include "collective_values.hpp"
#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain::test {

// Runs `algorithm` out of place and in place on `count` elements; checks both against the
// closed form, against each other and across ranks (failures are recorded, not thrown).
inline void check_allreduce(const Communicator& comm, std::string_view algorithm, DType t,
                            ReduceOp op, std::size_t count) {
  SCOPED_TRACE(describe(t, op, count));
  const Buffer send = inputs(t, comm.rank(), count);
  Buffer out(count, t);
  out.poison();
  comm.allreduce(send.data(), out.data(), count, t, op, algorithm);
  EXPECT_EQ(mismatches(out, op, comm.size()), 0u);
  EXPECT_TRUE(identical_on_all_ranks(comm, out.data(), out.bytes.size()));
  Buffer inplace = inputs(t, comm.rank(), count);
  comm.allreduce(inplace.data(), inplace.data(), count, t, op, algorithm);
  EXPECT_EQ(inplace.bytes, out.bytes);
}

}  // namespace mpitrain::test
