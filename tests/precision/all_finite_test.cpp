#include "mpitrain/precision/all_finite.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "test_bits.hpp"

namespace mpitrain {
namespace {

class AllFiniteTest : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    if (!simd_path_supported(GetParam())) {
      GTEST_SKIP() << "this CPU cannot run the " << to_string(GetParam()) << " path";
    }
  }
  bool check(const std::vector<float>& v) const { return detail::all_finite(v, GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(AllPaths, AllFiniteTest,
                         ::testing::Values(SimdPath::portable, SimdPath::avx2_f16c),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_P(AllFiniteTest, EmptyAndFiniteExtremesAreFinite) {
  EXPECT_TRUE(check({}));
  const float max = std::numeric_limits<float>::max();
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> v{0.0f, -0.0f, max, -max, denorm, -denorm, 1.0f, test::float_of(0x7f7fffffu)};
  for (int i = 0; i < 5000; ++i) v.push_back(static_cast<float>(i) * 1e30f);  // up to 5e33, finite
  EXPECT_TRUE(check(v));
}

// A single inf or NaN is found at every position of spans of every length up to 70: in the
// vector body and in the scalar tail.
TEST_P(AllFiniteTest, FindsOneNonFiniteValueAnywhere) {
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), test::float_of(0xff800001u),
                            test::float_of(0x7fa00000u)};
  for (std::size_t n = 1; n <= 70; ++n) {
    for (std::size_t at = 0; at < n; ++at) {
      for (float special : specials) {
        std::vector<float> v(n, 3.5f);
        v[at] = special;
        EXPECT_FALSE(check(v)) << "n " << n << " at " << at << " value " << test::hex(test::bits_of(special));
      }
    }
  }
}

TEST_P(AllFiniteTest, FindsNonFiniteValuesBeyondTheFirstBlock) {
  std::vector<float> v(3 * 4096 + 13, 1.0f);
  EXPECT_TRUE(check(v));
  v[2 * 4096 + 7] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(check(v));
  v[2 * 4096 + 7] = 1.0f;
  v.back() = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(check(v));
}

TEST(AllFinite, PublicFunctionUsesABestPath) {
  std::vector<float> v(1000, 2.0f);
  EXPECT_TRUE(all_finite(v));
  v[999] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite(v));
}

}  // namespace
}  // namespace mpitrain
