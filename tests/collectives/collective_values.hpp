#pragma once
// Closed-form inputs and expected results for the collectives tests, for every DType.
//
// Rank r contributes v(r, i) = ((i + 3 r) mod 7) - 3 (u8: (i + 3 r) mod 5): small integers, so
// sums over a few ranks are exact in every type (bf16 included) and every algorithm must give
// exactly the expected value. AVG results are computed the way the contract rounds them: the
// exact integer sum divided in the type's arithmetic (fp32 for 16-bit types, then one
// rounding; truncating division for integers).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/dtype.hpp"

namespace mpitrain::test {

inline constexpr DType kAllTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64,
                                      DType::u8,  DType::bf16, DType::f16};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max,
                                       ReduceOp::min};

// Returns element i of buf (of `type`) as a double (exact for every type).
inline double get(const void* buf, std::size_t i, DType type) {
  switch (type) {
    case DType::f32: return static_cast<const float*>(buf)[i];
    case DType::f64: return static_cast<const double*>(buf)[i];
    case DType::i32: return static_cast<const std::int32_t*>(buf)[i];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
    case DType::u8: return static_cast<const std::uint8_t*>(buf)[i];
    case DType::bf16: return to_float(static_cast<const bfloat16*>(buf)[i]);
    case DType::f16: return to_float(static_cast<const float16*>(buf)[i]);
  }
  return 0;
}

// Stores v (exactly representable in `type`) as element i of buf.
inline void set(void* buf, std::size_t i, DType type, double v) {
  switch (type) {
    case DType::f32: static_cast<float*>(buf)[i] = static_cast<float>(v); return;
    case DType::f64: static_cast<double*>(buf)[i] = v; return;
    case DType::i32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); return;
    case DType::i64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); return;
    case DType::u8: static_cast<std::uint8_t*>(buf)[i] = static_cast<std::uint8_t>(v); return;
    case DType::bf16: static_cast<bfloat16*>(buf)[i] = to_bfloat16(static_cast<float>(v)); return;
    case DType::f16: static_cast<float16*>(buf)[i] = to_float16(static_cast<float>(v)); return;
  }
}

// Returns rank r's input at index i.
inline double value(DType type, int rank, std::size_t i) {
  const std::size_t k = i + 3 * static_cast<std::size_t>(rank);
  if (type == DType::u8) return static_cast<double>(k % 5);
  return static_cast<double>(k % 7) - 3.0;
}

// Returns the reduction over ranks 0..n-1 at index i, rounded as the type's AVG rounds.
inline double expected(DType type, ReduceOp op, int n, std::size_t i) {
  double sum = 0;
  double hi = value(type, 0, i);
  double lo = hi;
  for (int r = 0; r < n; ++r) {
    const double v = value(type, r, i);
    sum += v;
    hi = std::max(hi, v);
    lo = std::min(lo, v);
  }
  switch (op) {
    case ReduceOp::sum: return sum;
    case ReduceOp::max: return hi;
    case ReduceOp::min: return lo;
    case ReduceOp::avg: break;
  }
  switch (type) {
    case DType::f32: return static_cast<float>(sum) / static_cast<float>(n);
    case DType::f64: return sum / n;
    case DType::i32:
    case DType::i64:
    case DType::u8: return std::trunc(sum / n);
    case DType::bf16: return to_float(to_bfloat16(static_cast<float>(sum) / static_cast<float>(n)));
    case DType::f16: return to_float(to_float16(static_cast<float>(sum) / static_cast<float>(n)));
  }
  return 0;
}

// A typed buffer of `count` elements, stored as bytes.
struct Buffer {
  Buffer(std::size_t count, DType type)
      : type(type), count(count), bytes(count * dtype_bytes(type)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  double operator[](std::size_t i) const { return get(bytes.data(), i, type); }
  void set(std::size_t i, double v) { test::set(bytes.data(), i, type, v); }
  // Fills with a pattern no result has (bytes 0xA5: large or negative in every type).
  void poison() { std::fill(bytes.begin(), bytes.end(), std::byte{0xA5}); }
  DType type;
  std::size_t count;
  std::vector<std::byte> bytes;
};

// Returns a buffer holding rank `rank`'s inputs at indices [first, first + count).
inline Buffer inputs(DType type, int rank, std::size_t count, std::size_t first = 0) {
  Buffer b(count, type);
  for (std::size_t i = 0; i < count; ++i) b.set(i, value(type, rank, first + i));
  return b;
}

// Returns the number of elements of `b` at [0, count) that differ from expected(op, i + first).
inline std::size_t mismatches(const Buffer& b, ReduceOp op, int n, std::size_t first = 0) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < b.count; ++i) wrong += b[i] != expected(b.type, op, n, first + i);
  return wrong;
}

// Returns the FNV-1a hash of the bytes.
inline std::uint64_t fnv1a(const void* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Returns true when every rank holds the same bytes.
inline bool identical_on_all_ranks(const Communicator& comm, const void* data, std::size_t n) {
  const auto h = static_cast<std::int64_t>(fnv1a(data, n));
  const std::vector<std::int64_t> all = comm.allgather_value(h);
  return std::all_of(all.begin(), all.end(), [h](std::int64_t x) { return x == h; });
}

// Returns the algorithms of `op` that can run on this communicator's layout: every name of
// algorithm_names(op) the Communicator does not report as unable to run on it (shm declines
// when the ranks span nodes: CommunicatorTest.ShmDeclinesAcrossNodes checks how; hierarchical
// declines on one node and on uneven nodes: hierarchical_algorithm_test.cpp).
inline std::vector<std::string_view> runnable_algorithms(const Communicator& comm, Collective op) {
  std::vector<std::string_view> names = algorithm_names(op);
  std::erase_if(names, [&](std::string_view a) {
    return !comm.cannot_run(a, op, DType::f32, ReduceOp::sum).empty();
  });
  return names;
}

inline std::string describe(DType type, ReduceOp op, std::size_t count) {
  return std::string(to_string(type)) + " " + std::string(to_string(op)) + " count " +
         std::to_string(count);
}

}  // namespace mpitrain::test
