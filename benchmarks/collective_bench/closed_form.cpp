#include "closed_form.hpp"

namespace mpitrain::bench {

double value(int rank, std::size_t i) {
  return static_cast<double>((i + 3 * static_cast<std::size_t>(rank)) % 7) - 3.0;
}

double expected_sum(int nranks, std::size_t i) {
  double s = 0;
  for (int r = 0; r < nranks; ++r) s += value(r, i);
  return s;
}

void store(std::byte* buf, std::size_t i, DType type, double v) {
  switch (type) {
    case DType::f32: reinterpret_cast<float*>(buf)[i] = static_cast<float>(v); return;
    case DType::f64: reinterpret_cast<double*>(buf)[i] = v; return;
    case DType::bf16: reinterpret_cast<bfloat16*>(buf)[i] = to_bfloat16(static_cast<float>(v)); return;
    case DType::f16: reinterpret_cast<float16*>(buf)[i] = to_float16(static_cast<float>(v)); return;
    default: return;
  }
}

double load(const std::byte* buf, std::size_t i, DType type) {
  switch (type) {
    case DType::f32: return reinterpret_cast<const float*>(buf)[i];
    case DType::f64: return reinterpret_cast<const double*>(buf)[i];
    case DType::bf16: return to_float(reinterpret_cast<const bfloat16*>(buf)[i]);
    case DType::f16: return to_float(reinterpret_cast<const float16*>(buf)[i]);
    default: return 0;
  }
}

void store_values(std::byte* buf, std::size_t count, DType type, int rank, std::size_t first) {
  for (std::size_t i = 0; i < count; ++i) store(buf, i, type, value(rank, first + i));
}

}  // namespace mpitrain::bench
