// balanced_order: every row follows every other row exactly once, never itself, the walk's
// end included.

#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "balanced_order.hpp"

namespace mpitrain::bench {
namespace {

TEST(BalancedOrder, OneRowIsItself) { EXPECT_EQ(balanced_order(1), std::vector<std::size_t>{0}); }

TEST(BalancedOrder, EveryOrderedPairOnce) {
  for (std::size_t k = 2; k <= 7; ++k) {
    SCOPED_TRACE(k);
    const std::vector<std::size_t> walk = balanced_order(k);
    ASSERT_EQ(walk.size(), k * (k - 1));
    std::set<std::pair<std::size_t, std::size_t>> pairs;
    for (std::size_t i = 0; i < walk.size(); ++i) {
      const std::size_t a = walk[i];
      const std::size_t b = walk[(i + 1) % walk.size()];  // the walk closes on its start
      ASSERT_LT(a, k);
      EXPECT_NE(a, b);
      EXPECT_TRUE(pairs.insert({a, b}).second) << a << " then " << b << " twice";
    }
    EXPECT_EQ(pairs.size(), k * (k - 1));
  }
}

}  // namespace
}  // namespace mpitrain::bench
