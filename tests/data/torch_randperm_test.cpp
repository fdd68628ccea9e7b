// torch_randperm against torch 1.13 (golden/sampler_golden.h5 from make_sampler_golden.py):
// head, tail and a position-weighted checksum of randperm(n) for n up to 3,000,000.

#include "mpitrain/data/torch_randperm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "h5_test_util.hpp"

namespace mpitrain::data {
namespace {

const std::string kGolden = std::string(MPITRAIN_TEST_DATA_DIR) + "/sampler_golden.h5";

TEST(TorchRandperm, SmallValueFromTorch) {
  // /usr/bin/python3: g = torch.Generator(); g.manual_seed(0); torch.randperm(10, generator=g)
  EXPECT_EQ(torch_randperm(10, 0), (std::vector<std::size_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}));
  EXPECT_EQ(torch_randperm(0, 5), std::vector<std::size_t>{});
  EXPECT_EQ(torch_randperm(1, 5), std::vector<std::size_t>{0});
  // Only the low 32 bits of the seed matter (at::mt19937 truncates).
  EXPECT_EQ(torch_randperm(50, 7), torch_randperm(50, (std::uint64_t{1} << 32) + 7));
}

TEST(TorchRandperm, IsAPermutation) {
  for (std::size_t n : {2u, 3u, 17u, 1000u}) {
    std::vector<std::size_t> p = torch_randperm(n, n * 31);
    std::sort(p.begin(), p.end());
    std::vector<std::size_t> expected(n);
    std::iota(expected.begin(), expected.end(), std::size_t{0});
    EXPECT_EQ(p, expected) << n;
  }
}

TEST(TorchRandperm, MatchesTorchGoldenChecksums) {
  const auto [params, dims] =
      test::read_dataset<std::int64_t>(kGolden, "randperm/params", H5T_NATIVE_INT64);
  const auto seeds =
      test::read_dataset<std::uint64_t>(kGolden, "randperm/seed", H5T_NATIVE_UINT64).first;
  const auto heads =
      test::read_dataset<std::int64_t>(kGolden, "randperm/head", H5T_NATIVE_INT64).first;
  const auto tails =
      test::read_dataset<std::int64_t>(kGolden, "randperm/tail", H5T_NATIVE_INT64).first;
  const auto sums =
      test::read_dataset<std::uint64_t>(kGolden, "randperm/checksum", H5T_NATIVE_UINT64).first;
  const std::size_t cases = static_cast<std::size_t>(dims[0]);
  ASSERT_GE(cases, 12u);
  for (std::size_t c = 0; c < cases; ++c) {
    const auto n = static_cast<std::size_t>(params[c * 2]);
    const auto edge = static_cast<std::size_t>(params[c * 2 + 1]);
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seeds[c]));
    const std::vector<std::size_t> p = torch_randperm(n, seeds[c]);
    ASSERT_EQ(p.size(), n);
    for (std::size_t i = 0; i < edge; ++i) {
      EXPECT_EQ(p[i], static_cast<std::size_t>(heads[c * edge + i])) << "head " << i;
      EXPECT_EQ(p[n - edge + i], static_cast<std::size_t>(tails[c * edge + i])) << "tail " << i;
    }
    std::uint64_t sum = 0;  // mod 2^64, as numpy's uint64 sum wraps
    for (std::size_t i = 0; i < n; ++i) sum += static_cast<std::uint64_t>(i + 1) * p[i];
    EXPECT_EQ(sum, sums[c]);
  }
}

}  // namespace
}  // namespace mpitrain::data
