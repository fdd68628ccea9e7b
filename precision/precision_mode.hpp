#pragma once
// Precision: the format in which forward/backward values are stored (DESIGN.md section 3).
// Master weights and optimizer state are always fp32; bf16/fp16 are emulated on CPU by
// rounding the values a GPU would keep in 16 bits, while products accumulate in fp32.

#include <cstdint>
#include <span>
#include <string_view>

namespace mpitrain {

enum class Precision : std::uint8_t { fp32, bf16, fp16 };

// Returns "no" for fp32 (the config spelling of mixed_precision), "bf16" or "fp16".
std::string_view to_string(Precision p) noexcept;
// Returns the precision named by `name` ("no"/"fp32", "bf16", "fp16"); throws std::invalid_argument.
Precision parse_precision(std::string_view name);

// Rounds every value in place to the nearest value of format `p` (no-op for fp32), with
// round-to-nearest-even and that format's range (fp16 overflows to inf from 65520 up).
void round_to_precision(std::span<float> values, Precision p) noexcept;

}  // namespace mpitrain
