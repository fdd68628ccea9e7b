// The command line of collective_bench (DESIGN.md section 8) and its parsing.

#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::bench {

struct Options {
  std::string op = "allreduce";
  std::string dtype = "f32";
  std::string algo = "all";
  std::string min_bytes = "1K";
  std::string max_bytes = "256M";
  int iters = 0;    // 0: until the means are known to 1% (see measure.hpp)
  int warmup = -1;  // -1: 2 per row
  bool check = false;
  std::string json;
  std::string tune;  // --tune FILE: write the fastest algorithm per size as a table
  // Where the buffers live: "private" (ordinary memory: the algorithms copy through their own
  // buffers) or "shared" (the node's shared segment, Communicator::allocate_shared, where the
  // engine keeps its gradient buckets: shm reads peers' buffers in place).
  std::string buffers = "private";
  bool in_place = false;  // send is recv (allreduce) or this rank's block of it (allgather)
};

// Usage errors: reported by rank 0, exit code 2 on every rank.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Returns the byte count written as a number with an optional binary suffix
// (K/KB/KiB = 2^10, M = 2^20, G = 2^30; case-insensitive); throws UsageError naming `flag`.
std::size_t parse_bytes(const std::string& flag, const std::string& text);

// Returns the types of a comma-separated --dtype list, in the order given; throws UsageError.
std::vector<DType> parse_dtypes(const std::string& text);

}  // namespace mpitrain::bench
