// Row: one line of collective_bench's table and of its --json rows (DESIGN.md section 8).

#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::bench {

struct Row {
  DType type = DType::f32;
  std::size_t size = 0;   // bytes as sent: count * element bytes
  std::size_t count = 0;  // elements of the whole buffer (Layout::count)
  std::string algo;
  double time_us = 0;  // mean per iteration, maximum over ranks
  double algbw = 0;    // GB/s: size / time
  double busbw = 0;    // GB/s: algbw * the collective's bus factor
  std::optional<std::uint64_t> wrong;  // wrong elements over all ranks; empty without --check
  double vs_mpi = 0;   // busbw / busbw of the mpi row of the same type and count
};

}  // namespace mpitrain::bench
