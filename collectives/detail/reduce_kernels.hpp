#pragma once
// Element-wise reduction kernels shared by the MPI user ops and the ring allreduce
// (internal to collectives/; buffers are untyped, counts in elements of `type`).
//
// Semantics per element, for every DType:
//   sum: a + b; 16-bit formats widen both to fp32, add, and round once to nearest even.
//   max/min: the larger/smaller value; for floating types a NaN operand makes the result NaN
//            (NaN propagates, as torch.maximum does), and for 16-bit formats +0 beats -0 in
//            max (and -0 wins min), so the result does not depend on the operand order.
//   avg: combines as sum; the finishing step divides (see sum_and_divide / divide_inplace).
// Integer sums wrap around (two's complement), integer division truncates toward zero.
//
// Cost: one pass over the operands, memory-bound. The 16-bit sums and averages have
// hand-written AVX-512 and AVX2/F16C loops, used when the CPU has them; the other loops are
// compiled for x86-64-v3 and baseline x86-64 and the loader picks one (GNU ifunc); plain
// conversions use precision/convert.hpp. Every path gives the results of the scalar
// conversions of precision/bfloat16.hpp and float16.hpp.

#include <cstddef>

#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::detail {

// inout[i] = in[i] (op) inout[i]. `in` and `inout` must not overlap.
void reduce_inplace(void* inout, const void* in, std::size_t count, DType type,
                    ReduceOp op) noexcept;

// out[i] = a[i] (op) b[i]. `out` may be `a` or `b` exactly; otherwise no overlap.
void reduce_into(void* out, const void* a, const void* b, std::size_t count, DType type,
                 ReduceOp op) noexcept;

// out[i] = (a[i] + b[i]) / divisor, the last combining step of an average: 16-bit formats
// add and divide in fp32 and round once; f32/f64 round the sum, then the quotient; integers
// truncate. `out` may be `a` or `b` exactly; otherwise no overlap.
void sum_and_divide(void* out, const void* a, const void* b, std::size_t count, DType type,
                    int divisor) noexcept;

// The instruction sets of the 16-bit sum and average loops; sum_and_divide, reduce_into and
// reduce_inplace use the first one this CPU has. All give the same bits.
enum class HalfSumIsa { avx512, avx2, scalar };

// Returns false, computing nothing, when this CPU lacks `isa` or `type` is not bf16 or f16;
// otherwise true, having computed sum_and_divide(out, a, b, count, type, divisor) with that
// instruction set. For the tests that hold every loop to the scalar conversions.
bool sum_and_divide_on(HalfSumIsa isa, void* out, const void* a, const void* b,
                       std::size_t count, DType type, int divisor) noexcept;

// data[i] = data[i] / divisor (integers truncate; 16-bit formats divide in fp32, round once).
void divide_inplace(void* data, std::size_t count, DType type, int divisor) noexcept;

// dst[i] = float(src[i]) for a 16-bit format (bf16 or f16); exact (precision/convert.hpp).
void widen_to_f32(const void* src, float* dst, std::size_t count, DType type) noexcept;

// dst[i] = round(src[i] / divisor) into a 16-bit format (bf16 or f16), one rounding.
void narrow_from_f32(const float* src, void* dst, std::size_t count, DType type,
                     int divisor) noexcept;

// ---- fp32 data with a 16-bit wire format (wire_ring_allreduce.cpp) ----------------------
// These give, bit for bit, what the kernels above give on round(local), the 16-bit value a
// rank would have sent had it converted its whole buffer first, with the received operand
// first, as ring_allreduce.cpp's reduce_into(dst, received, local). The one freedom: a sum of
// two NaNs is a quiet NaN whose payload may come from either operand (IEEE 754 leaves it
// open, and the compiler may order an addition's operands either way). `type` is bf16 or f16.

// wire[i] = wire[i] (op) round(local[i]): a middle combining step (avg combines as sum).
// One pass: reads 2 + 4 bytes, writes 2 bytes per element.
void combine_wire(void* wire, const float* local, std::size_t count, DType type,
                  ReduceOp op) noexcept;

// The last combining step: w = wire[i] (op) round(local[i]), for avg (wire[i] + round(local[i]))
// / divisor in fp32 with one rounding (as sum_and_divide; the other ops ignore divisor); then
// wire[i] = w and out[i] = float(w). `out` may be `local` exactly; otherwise no overlap. One
// pass: reads 2 + 4 bytes, writes 2 + 4 bytes per element.
void combine_wire_last(void* wire, const float* local, float* out, std::size_t count, DType type,
                       ReduceOp op, int divisor) noexcept;

}  // namespace mpitrain::detail
