#pragma once
// Reads the golden data written by golden/make_golden.py (see its docstring for the layout).

#include <cstdint>
#include <string>
#include <vector>

namespace mpitrain::test {

// Bit patterns: `output[i]` is the reference conversion of `input[i]`.
template <class In, class Out>
struct GoldenCases {
  std::vector<In> input;
  std::vector<Out> output;
};

// Returns the path of `file` inside tests/precision/golden.
std::string golden_path(const std::string& file);

// Returns group `name` of conversions.h5 whose inputs are 16-bit and outputs 32-bit patterns
// (f16_to_f32, bf16_to_f32), or the reverse (f32_to_f16_grid, f32_to_f16_edge, f32_to_bf16).
// Throws std::runtime_error naming the HDF5 call and the dataset on any failure.
GoldenCases<std::uint16_t, std::uint32_t> read_widening_cases(const std::string& name);
GoldenCases<std::uint32_t, std::uint16_t> read_narrowing_cases(const std::string& name);

}  // namespace mpitrain::test
