#include "mpitrain/precision/precision_mode.hpp"

#include <stdexcept>
#include <string>

#include "mpitrain/precision/convert.hpp"
#include "mpitrain/precision/simd_path.hpp"

namespace mpitrain {

std::string_view to_string(Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return "no";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "no";
}

Precision parse_precision(std::string_view name) {
  if (name == "no" || name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  throw std::invalid_argument("unknown precision '" + std::string(name) +
                              "' (expected no, bf16 or fp16)");
}

void round_to_precision(std::span<float> values, Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return;
    // The best path is supported by definition, so these cannot throw.
    case Precision::bf16: detail::round_to_bfloat16(values, best_simd_path()); return;
    case Precision::fp16: detail::round_to_float16(values, best_simd_path()); return;
  }
}

}  // namespace mpitrain
