#include "mpitrain/precision/precision_mode.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "mpitrain/precision/bfloat16.hpp"
#include "mpitrain/precision/float16.hpp"
#include "test_bits.hpp"

namespace mpitrain {
namespace {

TEST(PrecisionMode, ParsesConfigSpellingsAndPrintsThem) {
  EXPECT_EQ(parse_precision("no"), Precision::fp32);
  EXPECT_EQ(parse_precision("fp32"), Precision::fp32);
  EXPECT_EQ(parse_precision("bf16"), Precision::bf16);
  EXPECT_EQ(parse_precision("fp16"), Precision::fp16);
  EXPECT_EQ(to_string(Precision::fp32), "no");
  EXPECT_EQ(to_string(Precision::bf16), "bf16");
  EXPECT_EQ(to_string(Precision::fp16), "fp16");
  EXPECT_THROW(parse_precision("fp8"), std::invalid_argument);
}

TEST(PrecisionMode, RoundToPrecisionRoundsLikeTheScalarConversions) {
  // 1000 values spread over the whole float32 range, plus the fp16 overflow threshold.
  std::vector<float> values;
  for (std::uint32_t i = 0; i < 1000; ++i) values.push_back(test::float_of(i * 4294967u + i));
  values.push_back(65520.0f);
  values.push_back(65519.0f);
  values.push_back(1.0f + 0x1p-11f);

  std::vector<float> fp32 = values, bf16 = values, fp16 = values;
  round_to_precision(fp32, Precision::fp32);
  round_to_precision(bf16, Precision::bf16);
  round_to_precision(fp16, Precision::fp16);
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(test::bits_of(fp32[i]), test::bits_of(values[i]));
    EXPECT_EQ(test::bits_of(bf16[i]), test::bits_of(to_float(to_bfloat16(values[i]))));
    EXPECT_EQ(test::bits_of(fp16[i]), test::bits_of(to_float(to_float16(values[i]))));
  }
  EXPECT_EQ(fp16[1000], std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16[1001], 65504.0f);
  EXPECT_EQ(fp16[1002], 1.0f);  // tie -> even
}

}  // namespace
}  // namespace mpitrain
