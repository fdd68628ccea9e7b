#pragma once
// Bulk conversion between float32 and the 16-bit formats, and the fused 16-bit reductions
// the collectives use when gradients travel as bf16/fp16 (DESIGN.md section 3).
//
// Every function gives, element by element, exactly the result of the scalar conversions in
// bfloat16.hpp / float16.hpp (round to nearest even, float16 overflow to inf from 65520 up,
// subnormals, NaN -> quiet NaN of the same sign). They run on the fastest SimdPath the CPU
// supports (AVX2 + F16C on current x86-64, portable vector code otherwise); all paths give
// bit-identical results, except that when an addition meets two NaN operands IEEE 754 leaves
// open which payload survives (the result is a quiet NaN either way).
//
// Spans whose sizes differ throw std::invalid_argument naming both sizes. Count 0 is fine.

#include <span>

#include "mpitrain/precision/bfloat16.hpp"
#include "mpitrain/precision/float16.hpp"
#include "mpitrain/precision/simd_path.hpp"

namespace mpitrain {

// Writes out[i] = in[i] rounded to bfloat16 / float16.
void convert(std::span<const float> in, std::span<bfloat16> out);
void convert(std::span<const float> in, std::span<float16> out);
// Writes out[i] = in[i] as float32 (exact).
void convert(std::span<const bfloat16> in, std::span<float> out);
void convert(std::span<const float16> in, std::span<float> out);

// Adds the 16-bit values to an fp32 accumulator: acc[i] += float(in[i]) (one fp32 rounding).
void accumulate(std::span<const bfloat16> in, std::span<float> acc);
void accumulate(std::span<const float16> in, std::span<float> acc);

// Sums in 16-bit storage: inout[i] = round(float(a[i]) + float(inout[i])). The fp32 sum of
// two bfloat16 or float16 values rounded once more to 16 bits equals the correctly rounded
// sum (float32 has more than 2p+2 mantissa bits, so the double rounding is innocuous), which
// is what a GPU's native 16-bit addition gives. `a` may be the same span as `inout`.
void add_rounded(std::span<const bfloat16> a, std::span<bfloat16> inout);
void add_rounded(std::span<const float16> a, std::span<float16> inout);

namespace detail {

// The same operations on an explicitly chosen path, for tests and benchmarks; a path the CPU
// does not support throws std::invalid_argument.
void convert(std::span<const float> in, std::span<bfloat16> out, SimdPath path);
void convert(std::span<const float> in, std::span<float16> out, SimdPath path);
void convert(std::span<const bfloat16> in, std::span<float> out, SimdPath path);
void convert(std::span<const float16> in, std::span<float> out, SimdPath path);
void accumulate(std::span<const bfloat16> in, std::span<float> acc, SimdPath path);
void accumulate(std::span<const float16> in, std::span<float> acc, SimdPath path);
void add_rounded(std::span<const bfloat16> a, std::span<bfloat16> inout, SimdPath path);
void add_rounded(std::span<const float16> a, std::span<float16> inout, SimdPath path);

// Rounds every value in place to the nearest bfloat16 / float16 (the value stays float32):
// values[i] = to_float(to_bfloat16(values[i])), fused into one pass. round_to_precision uses
// these.
void round_to_bfloat16(std::span<float> values, SimdPath path);
void round_to_float16(std::span<float> values, SimdPath path);

}  // namespace detail
}  // namespace mpitrain
