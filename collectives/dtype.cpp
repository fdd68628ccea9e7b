#include "mpitrain/collectives/dtype.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace mpitrain {
namespace {

constexpr std::array<DType, 7> kTypes = {DType::f32, DType::f64, DType::i32, DType::i64,
                                         DType::u8,  DType::bf16, DType::f16};
constexpr std::array<ReduceOp, 4> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max,
                                          ReduceOp::min};

}  // namespace

std::size_t dtype_bytes(DType type) noexcept {
  switch (type) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::bf16: return 2;
    case DType::f16: return 2;
  }
  return 1;
}

std::string_view to_string(DType type) noexcept {
  switch (type) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "unknown";
}

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  for (DType t : kTypes) {
    if (to_string(t) == name) return t;
  }
  std::string valid;
  for (DType t : kTypes) {
    if (!valid.empty()) valid += ", ";
    valid += to_string(t);
  }
  throw std::invalid_argument("unknown dtype '" + std::string(name) + "' (valid: " + valid + ")");
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kOps) {
    if (to_string(op) == name) return op;
  }
  throw std::invalid_argument("unknown reduce op '" + std::string(name) +
                              "' (valid: sum, avg, max, min)");
}

}  // namespace mpitrain
