// BatchSharding: Accelerate's own expected shards (tests/test_data_loader.py of
// huggingface/accelerate, 2 processes, no shuffle), an independent round-by-round simulation
// of BatchSamplerShard checked exhaustively on small cases, closed-form counts, padding
// bookkeeping for gather_for_metrics, and the distributed_sampler mode.

#include "mpitrain/data/batch_sharding.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "mpitrain/data/distributed_sampler.hpp"
#include "mpitrain/data/torch_randperm.hpp"

namespace mpitrain::data {
namespace {

using Batches = std::vector<std::vector<std::size_t>>;

ShardingOptions make(std::size_t n, std::size_t world, std::size_t rank, std::size_t batch,
                     bool split, bool even, bool drop_last, bool shuffle = false,
                     std::uint64_t seed = 0) {
  ShardingOptions o;
  o.dataset_size = n;
  o.world_size = world;
  o.rank = rank;
  o.batch_size = batch;
  o.split_batches = split;
  o.even_batches = even;
  o.drop_last = drop_last;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

Batches shards(const ShardingOptions& o, std::int64_t epoch = 0) {
  return BatchSharding(o).epoch_batches(epoch).batches;
}

struct AccelerateCase {
  std::size_t n;
  std::size_t batch;
  bool split;
  bool even;
  bool drop_last;
  Batches rank0;
  Batches rank1;
};

// Expected shards as listed in Accelerate's test suite (BatchSampler(range(n), batch,
// drop_last) sharded over 2 processes).
const std::vector<AccelerateCase>& accelerate_cases() {
  static const std::vector<AccelerateCase> cases = {
      // no split, even
      {24,
       3,
       false,
       true,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}},
      {24,
       3,
       false,
       true,
       true,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}},
      {21,
       3,
       false,
       true,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {0, 1, 2}}},
      {21,
       3,
       false,
       true,
       true,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}},
      {22,
       3,
       false,
       true,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}}},
      {22,
       3,
       false,
       true,
       true,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}},
      {20,
       3,
       false,
       true,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 0}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {1, 2, 3}}},
      {20,
       3,
       false,
       true,
       true,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}},
      {2, 3, false, true, false, {{0, 1, 0}}, {{1, 0, 1}}},
      {2, 3, false, true, true, {}, {}},
      // split, even
      {24,
       4,
       true,
       true,
       false,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}},
      {24,
       4,
       true,
       true,
       true,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}},
      {22,
       4,
       true,
       true,
       false,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {0, 1}}},
      {22,
       4,
       true,
       true,
       true,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}},
      {21,
       4,
       true,
       true,
       false,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 0}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {1, 2}}},
      {21,
       4,
       true,
       true,
       true,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}},
      {2, 4, true, true, false, {{0, 1}}, {{0, 1}}},
      {2, 4, true, true, true, {}, {}},
      // no split, uneven
      {21,
       3,
       false,
       false,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}},
      {22,
       3,
       false,
       false,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21}}},
      {20,
       3,
       false,
       false,
       false,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}},
      {20,
       3,
       false,
       false,
       true,
       {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}},
       {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}},
      {2, 3, false, false, false, {{0, 1}}, {}},
      // split, uneven
      {22,
       4,
       true,
       false,
       false,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}},
      {21,
       4,
       true,
       false,
       false,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}},
      {21,
       4,
       true,
       false,
       true,
       {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}},
       {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}}},
      {2, 4, true, false, false, {{0, 1}}, {}},
  };
  return cases;
}

TEST(BatchSharding, MatchesAccelerateExpectedShards) {
  for (const AccelerateCase& c : accelerate_cases()) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " batch=" + std::to_string(c.batch) +
                 " split=" + std::to_string(c.split) + " even=" + std::to_string(c.even) +
                 " drop_last=" + std::to_string(c.drop_last));
    const Batches r0 = shards(make(c.n, 2, 0, c.batch, c.split, c.even, c.drop_last));
    const Batches r1 = shards(make(c.n, 2, 1, c.batch, c.split, c.even, c.drop_last));
    EXPECT_EQ(r0, c.rank0);
    EXPECT_EQ(r1, c.rank1);
    EXPECT_EQ(BatchSharding(make(c.n, 2, 0, c.batch, c.split, c.even, c.drop_last)).num_batches(0),
              c.rank0.size());
    EXPECT_EQ(BatchSharding(make(c.n, 2, 0, c.batch, c.split, c.even, c.drop_last)).num_batches(1),
              c.rank1.size());
  }
}

// Round-by-round simulation of prepare_data_loader + BatchSamplerShard over `order`, written
// from their documented behaviour: a BatchSampler(order, batch_size, drop_last) feeds the
// shards (none for a single process).
std::vector<Batches> simulate(const std::vector<std::size_t>& order, std::size_t world,
                              std::size_t batch_size, bool split, bool even, bool drop_last) {
  Batches sampler_batches;
  for (std::size_t i = 0; i < order.size(); i += batch_size) {
    const std::size_t end = std::min(i + batch_size, order.size());
    if (drop_last && end - i < batch_size) break;
    sampler_batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                                 order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  std::vector<Batches> out(world);
  if (world == 1) {  // prepare_data_loader does not shard for one process
    out[0] = sampler_batches;
    return out;
  }
  if (sampler_batches.empty()) return out;
  if (split) {
    const std::size_t b = batch_size / world;
    for (Batches::size_type k = 0; k < sampler_batches.size(); ++k) {
      std::vector<std::size_t> batch = sampler_batches[k];
      if (batch.size() < batch_size) {
        if (even) {  // complete it with the first batch, repeated while too short
          std::vector<std::size_t> filler = sampler_batches[0];
          while (filler.size() < batch_size)
            filler.insert(filler.end(), filler.begin(), filler.end());
          batch.insert(batch.end(), filler.begin(), filler.end());
        }
      }
      for (std::size_t r = 0; r < world; ++r) {
        if (r * b >= batch.size()) continue;
        out[r].emplace_back(
            batch.begin() + static_cast<std::ptrdiff_t>(r * b),
            batch.begin() + static_cast<std::ptrdiff_t>(std::min(batch.size(), (r + 1) * b)));
      }
    }
    return out;
  }
  // No split: rounds of `world` sampler batches; a round is handed out when it is complete
  // and its last batch is full.
  std::size_t k = 0;
  for (; k + world <= sampler_batches.size() && sampler_batches[k + world - 1].size() == batch_size;
       k += world) {
    for (std::size_t r = 0; r < world; ++r) out[r].push_back(sampler_batches[k + r]);
  }
  if (drop_last || k == sampler_batches.size()) return out;
  if (!even) {
    for (std::size_t r = 0; k + r < sampler_batches.size(); ++r)
      out[r].push_back(sampler_batches[k + r]);
    return out;
  }
  // Even: the rest of the samples, then the first `world` batches' samples (repeated while
  // fewer than world * batch_size), cut into `world` batches of batch_size.
  std::vector<std::size_t> filler;
  for (std::size_t j = 0; j < world && j < sampler_batches.size(); ++j) {
    filler.insert(filler.end(), sampler_batches[j].begin(), sampler_batches[j].end());
  }
  while (filler.size() < world * batch_size)
    filler.insert(filler.end(), filler.begin(), filler.end());
  std::vector<std::size_t> rest;
  for (std::size_t j = k; j < sampler_batches.size(); ++j) {
    rest.insert(rest.end(), sampler_batches[j].begin(), sampler_batches[j].end());
  }
  rest.insert(rest.end(), filler.begin(), filler.end());
  for (std::size_t r = 0; r < world; ++r) {
    out[r].emplace_back(rest.begin() + static_cast<std::ptrdiff_t>(r * batch_size),
                        rest.begin() + static_cast<std::ptrdiff_t>((r + 1) * batch_size));
  }
  return out;
}

TEST(BatchSharding, EqualsSimulationExhaustively) {
  std::size_t checked = 0;
  for (std::size_t n = 0; n <= 40; ++n) {
    for (std::size_t world = 1; world <= 5; ++world) {
      for (std::size_t batch = 1; batch <= 6; ++batch) {
        for (int flags = 0; flags < 8; ++flags) {
          const bool split = flags & 1, even = flags & 2, drop_last = flags & 4;
          if (split && batch % world != 0) continue;
          for (bool shuffle : {false, true}) {
            const std::uint64_t seed = 3;
            const std::int64_t epoch = 1;
            std::vector<std::size_t> order =
                shuffle ? torch_randperm(n, seed + 1) : std::vector<std::size_t>(n);
            if (!shuffle) std::iota(order.begin(), order.end(), std::size_t{0});
            const std::vector<Batches> expected =
                simulate(order, world, batch, split, even, drop_last);
            for (std::size_t r = 0; r < world; ++r) {
              const ShardingOptions o =
                  make(n, world, r, batch, split, even, drop_last, shuffle, seed);
              const BatchSharding sharding(o);
              const EpochBatches got = sharding.epoch_batches(epoch);
              ASSERT_EQ(got.batches, expected[r])
                  << "n=" << n << " world=" << world << " rank=" << r << " batch=" << batch
                  << " split=" << split << " even=" << even << " drop_last=" << drop_last
                  << " shuffle=" << shuffle;
              ASSERT_EQ(sharding.num_batches(r), expected[r].size());
              ASSERT_EQ(got.real_counts.size(), got.batches.size());
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 10000u);
}

// Closed forms: counts, and the padding bookkeeping gather_for_metrics relies on.
TEST(BatchSharding, CountsAndRealSamplesInClosedForm) {
  for (std::size_t n = 0; n <= 50; ++n) {
    for (std::size_t world = 1; world <= 4; ++world) {
      for (std::size_t batch = 1; batch <= 8; ++batch) {
        for (int flags = 0; flags < 8; ++flags) {
          const bool split = flags & 1, even = flags & 2, drop_last = flags & 4;
          if (split && batch % world != 0) continue;
          SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world) +
                       " batch=" + std::to_string(batch) + " flags=" + std::to_string(flags));
          const std::size_t g = split ? batch : batch * world;  // global batch
          const std::size_t b = g / world;                      // rank batch
          const std::size_t steps = drop_last ? n / g : (n + g - 1) / g;
          const bool full = drop_last || (even && world > 1);  // every batch has b rows
          std::vector<std::size_t> seen(n, 0);
          std::size_t real_total = 0, last_step_real = 0;
          for (std::size_t r = 0; r < world; ++r) {
            const BatchSharding sharding(make(n, world, r, batch, split, even, drop_last, true, 9));
            EXPECT_EQ(sharding.global_batch_size(), g);
            EXPECT_EQ(sharding.rank_batch_size(), b);
            EXPECT_EQ(sharding.max_num_batches(), steps);
            const EpochBatches e = sharding.epoch_batches(2);
            if (full) {
              EXPECT_EQ(e.batches.size(), steps);
            }
            for (std::size_t i = 0; i < e.batches.size(); ++i) {
              const auto& batch_i = e.batches[i];
              if (full) {
                EXPECT_EQ(batch_i.size(), b);
              }
              EXPECT_GT(batch_i.size(), 0u);
              // Real samples: stream positions i*g + r*b + k below n.
              const std::size_t first = i * g + r * b;
              const std::size_t real = first >= n ? 0 : std::min(n - first, batch_i.size());
              EXPECT_EQ(e.real_counts[i], real);
              for (std::size_t k = 0; k < real; ++k) ++seen[batch_i[k]];
              real_total += real;
              if (i + 1 == steps) last_step_real += real;
            }
            EXPECT_EQ(sharding.real_samples_per_epoch(), drop_last ? n / g * g : n);
            EXPECT_EQ(sharding.last_global_batch_real_count(),
                      steps == 0 ? 0 : (drop_last ? g : n - (steps - 1) * g));
          }
          EXPECT_EQ(real_total, drop_last ? n / g * g : n);
          EXPECT_EQ(last_step_real, steps == 0 ? 0 : (drop_last ? g : n - (steps - 1) * g));
          for (std::size_t count : seen) EXPECT_LE(count, 1u);
          if (!drop_last) {
            for (std::size_t count : seen) EXPECT_EQ(count, 1u);
          }
        }
      }
    }
  }
}

TEST(BatchSharding, SingleRankIsTorchRandomSamplerOrder) {
  // world 1, no split: torch DataLoader(shuffle with generator seeded seed + epoch).
  const BatchSharding sharding(make(103, 1, 0, 10, false, true, false, true, 40));
  const EpochBatches e = sharding.epoch_batches(2);
  std::vector<std::size_t> flat;
  for (const auto& b : e.batches) flat.insert(flat.end(), b.begin(), b.end());
  EXPECT_EQ(flat, torch_randperm(103, 42));
  EXPECT_EQ(e.batches.back().size(), 3u);  // world 1: the short tail has nothing to wrap
  EXPECT_EQ(e.real_counts.back(), 3u);
}

TEST(BatchSharding, EvenBatchesWrapAroundClosedForm) {
  // n = 10, world 3, batch 2, no shuffle: global batch 6, 2 steps; positions 10, 11 wrap.
  const std::vector<Batches> expected = {{{0, 1}, {6, 7}}, {{2, 3}, {8, 9}}, {{4, 5}, {0, 1}}};
  const std::vector<std::vector<std::size_t>> real = {{2, 2}, {2, 2}, {2, 0}};
  for (std::size_t r = 0; r < 3; ++r) {
    const EpochBatches e = BatchSharding(make(10, 3, r, 2, false, true, false)).epoch_batches(0);
    EXPECT_EQ(e.batches, expected[r]) << r;
    EXPECT_EQ(e.real_counts, real[r]) << r;
  }
  // split: global batch 6 over 3 ranks (2 each), the same stream.
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(shards(make(10, 3, r, 6, true, true, false)), expected[r]) << r;
  }
}

TEST(BatchSharding, Validation) {
  EXPECT_THROW(BatchSharding(make(10, 0, 0, 2, false, true, false)), std::invalid_argument);
  EXPECT_THROW(BatchSharding(make(10, 2, 2, 2, false, true, false)), std::invalid_argument);
  EXPECT_THROW(BatchSharding(make(10, 2, 0, 0, false, true, false)), std::invalid_argument);
  try {
    BatchSharding(make(10, 4, 0, 6, true, true, false));
    ADD_FAILURE() << "split_batches with 6 over 4 ranks accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("batch size (6) must be a multiple of the number of ranks (4)"),
        std::string::npos)
        << e.what();
  }
  ShardingOptions o = make(10, 2, 0, 2, true, true, false);
  o.mode = ShardingMode::distributed_sampler;
  EXPECT_THROW(BatchSharding{o}, std::invalid_argument);
}

// distributed_sampler mode: DistributedSampler's indices cut into batches of batch_size;
// real counts remove exactly the sampler's padding.
TEST(BatchSharding, DistributedSamplerMode) {
  for (std::size_t n : {0u, 1u, 7u, 10u, 23u, 64u}) {
    for (std::size_t world = 1; world <= 4; ++world) {
      for (std::size_t batch : {1u, 3u, 4u}) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " world=" + std::to_string(world) + " batch=" +
                       std::to_string(batch) + " drop_last=" + std::to_string(drop_last));
          std::size_t real_total = 0;
          std::vector<std::size_t> seen(n, 0);
          for (std::size_t r = 0; r < world; ++r) {
            ShardingOptions o = make(n, world, r, batch, false, true, drop_last, true, 5);
            o.mode = ShardingMode::distributed_sampler;
            const BatchSharding sharding(o);
            const EpochBatches e = sharding.epoch_batches(3);
            DistributedSampler sampler(n, world, r, true, 5, drop_last);
            sampler.set_epoch(3);
            const std::vector<std::size_t> mine = sampler.indices();
            const std::size_t count =
                drop_last ? mine.size() / batch : (mine.size() + batch - 1) / batch;
            ASSERT_EQ(e.batches.size(), count);
            EXPECT_EQ(sharding.num_batches(r), count);
            for (std::size_t i = 0; i < count; ++i) {
              const std::size_t end = std::min(mine.size(), (i + 1) * batch);
              EXPECT_EQ(e.batches[i], std::vector<std::size_t>(
                                          mine.begin() + static_cast<std::ptrdiff_t>(i * batch),
                                          mine.begin() + static_cast<std::ptrdiff_t>(end)));
              for (std::size_t k = 0; k < e.real_counts[i]; ++k) ++seen[e.batches[i][k]];
              real_total += e.real_counts[i];
            }
          }
          for (std::size_t c : seen) EXPECT_LE(c, 1u);
          if (!drop_last) {
            EXPECT_EQ(real_total, n);
          }
          ShardingOptions o = make(n, world, 0, batch, false, true, drop_last, true, 5);
          o.mode = ShardingMode::distributed_sampler;
          EXPECT_EQ(BatchSharding(o).real_samples_per_epoch(), real_total);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mpitrain::data
