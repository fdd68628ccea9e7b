#pragma once
// all_finite: the inf/NaN check of mixed-precision training. The engine runs it over the
// (scaled) gradients to decide `found_inf` for the LossScaler, and for `nan_policy`.

#include <span>

#include "mpitrain/precision/simd_path.hpp"

namespace mpitrain {

// Returns true when no value is inf or NaN (true for an empty span). Reads the values once,
// vectorised, and stops early (per block of 4096 values) once a non-finite value is seen.
bool all_finite(std::span<const float> values) noexcept;

namespace detail {
// The same on an explicitly chosen path, for tests; an unsupported path throws
// std::invalid_argument.
bool all_finite(std::span<const float> values, SimdPath path);
}  // namespace detail

}  // namespace mpitrain
