// DistributedSampler: index-for-index equality with torch 1.13's DistributedSampler
// (golden/sampler_golden.h5), and properties over many sizes, worlds and epochs.

#include "mpitrain/data/distributed_sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "h5_test_util.hpp"
#include "mpitrain/data/torch_randperm.hpp"

namespace mpitrain::data {
namespace {

const std::string kGolden = std::string(MPITRAIN_TEST_DATA_DIR) + "/sampler_golden.h5";

TEST(DistributedSampler, MatchesTorchGolden) {
  const auto [params, dims] =
      test::read_dataset<std::int64_t>(kGolden, "sampler/params", H5T_NATIVE_INT64);
  const auto seeds =
      test::read_dataset<std::uint64_t>(kGolden, "sampler/seed", H5T_NATIVE_UINT64).first;
  const auto flat =
      test::read_dataset<std::int32_t>(kGolden, "sampler/indices", H5T_NATIVE_INT32).first;
  ASSERT_EQ(dims.size(), 2u);
  ASSERT_EQ(dims[1], 8u);
  const std::size_t cases = static_cast<std::size_t>(dims[0]);
  ASSERT_GT(cases, 2000u);
  std::size_t large = 0, mismatched = 0;
  for (std::size_t c = 0; c < cases; ++c) {
    const std::int64_t* p = &params[c * 8];
    const auto n = static_cast<std::size_t>(p[0]);
    const auto world = static_cast<std::size_t>(p[1]);
    const auto rank = static_cast<std::size_t>(p[2]);
    const std::int64_t epoch = p[3];
    const bool drop_last = p[4] != 0, shuffle = p[5] != 0;
    const auto offset = static_cast<std::size_t>(p[6]);
    const auto length = static_cast<std::size_t>(p[7]);
    DistributedSampler sampler(n, world, rank, shuffle, seeds[c], drop_last);
    sampler.set_epoch(epoch);
    const std::vector<std::size_t> got = sampler.indices();
    const std::vector<std::size_t> expected(
        flat.begin() + static_cast<std::ptrdiff_t>(offset),
        flat.begin() + static_cast<std::ptrdiff_t>(offset + length));
    if (got != expected || sampler.num_samples() != length) {
      ++mismatched;
      ADD_FAILURE() << "n=" << n << " world=" << world << " rank=" << rank << " seed=" << seeds[c]
                    << " epoch=" << epoch << " drop_last=" << drop_last << " shuffle=" << shuffle
                    << ": " << got.size() << " indices, torch has " << length;
      if (mismatched > 5) return;
    }
    large += n > 65536 ? 1 : 0;
  }
  EXPECT_GE(large, 4u);  // the golden file holds sizes above 2^16
}

TEST(DistributedSampler, SizesFollowTorch) {
  // torch: drop_last and n % R != 0 -> ceil((n - R) / R); else ceil(n / R).
  EXPECT_EQ(DistributedSampler(10, 4, 0, true, 0, false).num_samples(), 3u);
  EXPECT_EQ(DistributedSampler(10, 4, 0, true, 0, false).total_size(), 12u);
  EXPECT_EQ(DistributedSampler(10, 4, 0, true, 0, true).num_samples(), 2u);
  EXPECT_EQ(DistributedSampler(3, 4, 0, true, 0, true).num_samples(), 0u);
  EXPECT_EQ(DistributedSampler(3, 4, 0, true, 0, false).num_samples(), 1u);
  EXPECT_EQ(DistributedSampler(0, 4, 0, true, 0, false).num_samples(), 0u);
  EXPECT_EQ(DistributedSampler(0, 4, 3, true, 0, false).indices(), std::vector<std::size_t>{});
  EXPECT_THROW(DistributedSampler(10, 0, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 4, 4), std::invalid_argument);
}

TEST(DistributedSampler, UnshuffledPaddingRepeatsFromTheStart) {
  // n = 2, R = 5: [0, 1] padded to [0, 1, 0, 1, 0]; rank r takes position r.
  for (std::size_t r = 0; r < 5; ++r) {
    const DistributedSampler s(2, 5, r, false);
    EXPECT_EQ(s.indices(), std::vector<std::size_t>{r % 2}) << r;
    EXPECT_EQ(s.real_samples(), r < 2 ? 1u : 0u) << r;
  }
  // n = 7, R = 3: total 9, [0..6, 0, 1]; rank 1 takes 1, 4, 7 -> 1, 4, 0.
  EXPECT_EQ(DistributedSampler(7, 3, 1, false).indices(), (std::vector<std::size_t>{1, 4, 0}));
  EXPECT_EQ(DistributedSampler(7, 3, 2, false).indices(), (std::vector<std::size_t>{2, 5, 1}));
  EXPECT_EQ(DistributedSampler(7, 3, 0, false).indices(), (std::vector<std::size_t>{0, 3, 6}));
  EXPECT_EQ(DistributedSampler(7, 3, 0, false, 0, true).indices(),
            (std::vector<std::size_t>{0, 3}));
}

// Over many (n, R, epoch): all ranks share one global list; without drop_last the real
// samples cover every index exactly once and the padding repeats the list from its start;
// with drop_last every rank's indices are distinct and the list is the order's prefix.
TEST(DistributedSampler, PropertiesAcrossRanksAndEpochs) {
  for (std::size_t n : {0u, 1u, 2u, 5u, 12u, 13u, 31u, 64u, 97u}) {
    for (std::size_t world = 1; world <= 9; ++world) {
      for (bool drop_last : {false, true}) {
        for (std::int64_t epoch : {0, 1, 5}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world) +
                       " drop_last=" + std::to_string(drop_last) +
                       " epoch=" + std::to_string(epoch));
          const std::vector<std::size_t> order =
              torch_randperm(n, 11 + static_cast<std::uint64_t>(epoch));
          std::vector<std::size_t> global;
          std::vector<std::size_t> seen(n, 0);
          std::size_t total_real = 0;
          for (std::size_t r = 0; r < world; ++r) {
            DistributedSampler s(n, world, r, true, 11, drop_last);
            s.set_epoch(epoch);
            if (r == 0) global = s.global_indices();
            EXPECT_EQ(s.global_indices(), global);
            const std::vector<std::size_t> mine = s.indices();
            ASSERT_EQ(mine.size(), s.num_samples());
            for (std::size_t i = 0; i < mine.size(); ++i) {
              EXPECT_EQ(mine[i], global[i * world + r]);
              if (i < s.real_samples()) ++seen[mine[i]];
            }
            total_real += s.real_samples();
          }
          ASSERT_EQ(global.size() % world, 0u);
          for (std::size_t j = 0; j < global.size(); ++j) EXPECT_EQ(global[j], order[j % n]);
          if (drop_last) {
            EXPECT_EQ(global.size(), n / world * world);
            EXPECT_EQ(total_real, global.size());
            for (std::size_t count : seen) EXPECT_LE(count, 1u);
          } else {
            EXPECT_EQ(global.size(), (n + world - 1) / world * world);
            EXPECT_EQ(total_real, n);
            for (std::size_t count : seen) EXPECT_EQ(count, 1u);
          }
        }
      }
    }
  }
}

TEST(DistributedSampler, EpochChangesOrderSeedPlusEpoch) {
  DistributedSampler a(100, 1, 0, true, 5);
  a.set_epoch(2);
  DistributedSampler b(100, 1, 0, true, 7);  // seed + epoch = 7 in both
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), torch_randperm(100, 7));
  a.set_epoch(3);
  EXPECT_NE(a.indices(), b.indices());
  a.set_epoch(-2);  // Python: manual_seed(5 - 2)
  EXPECT_EQ(a.indices(), torch_randperm(100, 3));
}

}  // namespace
}  // namespace mpitrain::data
