// DType and ReduceOp: sizes, names, parsing, and the C++ type mapping.

#include "mpitrain/collectives/dtype.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "collective_values.hpp"

namespace mpitrain {
namespace {

TEST(DType, BytesPerElement) {
  EXPECT_EQ(dtype_bytes(DType::f32), 4u);
  EXPECT_EQ(dtype_bytes(DType::f64), 8u);
  EXPECT_EQ(dtype_bytes(DType::i32), 4u);
  EXPECT_EQ(dtype_bytes(DType::i64), 8u);
  EXPECT_EQ(dtype_bytes(DType::u8), 1u);
  EXPECT_EQ(dtype_bytes(DType::bf16), 2u);
  EXPECT_EQ(dtype_bytes(DType::f16), 2u);
}

TEST(DType, NamesRoundTrip) {
  for (DType t : test::kAllTypes) EXPECT_EQ(parse_dtype(to_string(t)), t);
  for (ReduceOp op : test::kAllOps) EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(to_string(DType::bf16), "bf16");
  EXPECT_EQ(to_string(ReduceOp::avg), "avg");
}

TEST(DType, UnknownNamesThrowListingValidOnes) {
  try {
    parse_dtype("fp32");
    FAIL() << "parse_dtype accepted fp32";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fp32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  }
  EXPECT_THROW(parse_reduce_op("prod"), std::invalid_argument);
  EXPECT_THROW(parse_dtype(""), std::invalid_argument);
}

TEST(DType, CppTypesMapToDTypes) {
  static_assert(dtype_of_v<float> == DType::f32);
  static_assert(dtype_of_v<const double> == DType::f64);
  static_assert(dtype_of_v<std::int32_t> == DType::i32);
  static_assert(dtype_of_v<std::int64_t> == DType::i64);
  static_assert(dtype_of_v<std::uint8_t> == DType::u8);
  static_assert(dtype_of_v<bfloat16> == DType::bf16);
  static_assert(dtype_of_v<const float16> == DType::f16);
  EXPECT_EQ(sizeof(bfloat16), dtype_bytes(DType::bf16));
  EXPECT_EQ(sizeof(float16), dtype_bytes(DType::f16));
}

}  // namespace
}  // namespace mpitrain
