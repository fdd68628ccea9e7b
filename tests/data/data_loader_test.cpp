// DataLoader: batches follow the sharding plan and carry the right rows; epochs advance;
// skip_first_batches and load_state resume mid-epoch with exactly the remaining batches of
// an uninterrupted epoch; state round trip; errors.

#include "mpitrain/data/data_loader.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace mpitrain::data {
namespace {

// Example i: features (i * 10 + j) for j < 3, label i % 5.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(std::size_t n) : n_(n) {}
  std::size_t size() const noexcept override { return n_; }
  const Shape& feature_shape() const noexcept override { return shape_; }
  std::optional<std::size_t> num_classes() const noexcept override { return 5; }
  std::string describe() const override { return "index dataset"; }

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features,
                  std::span<std::int32_t> labels) const override {
    for (std::size_t r = 0; r < indices.size(); ++r) {
      for (std::size_t j = 0; j < 3; ++j)
        features[r * 3 + j] = static_cast<float>(indices[r] * 10 + j);
      labels[r] = static_cast<std::int32_t>(indices[r] % 5);
    }
  }

 private:
  std::size_t n_;
  Shape shape_{3};
};

struct Seen {
  std::vector<std::size_t> indices;
  std::size_t real_count;
  bool operator==(const Seen&) const = default;
};

// Returns the rest of the loader's current epoch, checking each batch's rows and flags.
std::vector<Seen> drain(DataLoader& loader) {
  std::vector<Seen> out;
  const std::int64_t epoch = loader.epoch();
  Batch batch;
  while (loader.next(batch)) {
    const std::size_t rows = batch.indices.size();
    EXPECT_EQ(batch.features.shape(), Shape({rows, 3}));
    EXPECT_EQ(batch.labels.size(), rows);
    for (std::size_t r = 0; r < rows; ++r) {
      EXPECT_EQ(batch.labels[r], static_cast<std::int32_t>(batch.indices[r] % 5));
      for (std::size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(batch.features[r * 3 + j], static_cast<float>(batch.indices[r] * 10 + j));
      }
    }
    EXPECT_EQ(batch.position + 1, loader.position());
    EXPECT_EQ(batch.is_last, loader.position() == loader.batches_per_epoch());
    EXPECT_EQ(batch.is_last, loader.end_of_epoch());
    out.push_back({batch.indices, batch.real_count});
  }
  EXPECT_EQ(loader.epoch(), epoch + 1);  // next() returned false: the next epoch begins
  EXPECT_EQ(loader.position(), 0u);
  return out;
}

DataLoaderOptions options(std::size_t world, std::size_t rank, std::size_t batch, bool split,
                          bool even, bool drop_last, std::uint64_t seed = 17) {
  DataLoaderOptions o;
  o.world_size = world;
  o.rank = rank;
  o.batch_size = batch;
  o.split_batches = split;
  o.even_batches = even;
  o.drop_last = drop_last;
  o.seed = seed;
  return o;
}

TEST(DataLoader, BatchesFollowTheShardingPlan) {
  auto dataset = std::make_shared<IndexDataset>(23);
  for (std::size_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(dataset, options(3, rank, 4, false, true, false));
    loader.set_epoch(5);
    ShardingOptions s;
    s.dataset_size = 23;
    s.world_size = 3;
    s.rank = rank;
    s.batch_size = 4;
    s.seed = 17;
    const EpochBatches plan = BatchSharding(s).epoch_batches(5);
    const std::vector<Seen> got = drain(loader);
    ASSERT_EQ(got.size(), plan.batches.size());
    EXPECT_EQ(loader.batches_per_epoch(), 2u);  // ceil(23 / 12)
    EXPECT_EQ(loader.real_samples_per_epoch(), 23u);
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].indices, plan.batches[i]);
      EXPECT_EQ(got[i].real_count, plan.real_counts[i]);
    }
  }
}

TEST(DataLoader, EpochsAdvanceAndRepeatDeterministically) {
  auto dataset = std::make_shared<IndexDataset>(40);
  DataLoader loader(dataset, options(2, 1, 5, false, true, false));
  const std::vector<Seen> e0 = drain(loader);
  const std::vector<Seen> e1 = drain(loader);  // epoch 1, reached by the loop itself
  EXPECT_NE(e0, e1);
  loader.set_epoch(0);
  EXPECT_EQ(drain(loader), e0);
  DataLoader other(dataset, options(2, 1, 5, false, true, false));
  other.set_epoch(1);
  EXPECT_EQ(drain(other), e1);
}

// For every cut point k: a loader told to skip k batches (or loaded with the state of one
// that consumed k) yields exactly batches k.. of the uninterrupted epoch.
TEST(DataLoader, ResumeMidEpochGivesTheSameRemainingBatches) {
  auto dataset = std::make_shared<IndexDataset>(37);
  for (std::size_t world : {1u, 2u, 3u}) {
    for (int flags = 0; flags < 8; ++flags) {
      const bool split = flags & 1, even = flags & 2, drop_last = flags & 4;
      const std::size_t batch = split ? 2 * world : 3;
      for (std::size_t rank = 0; rank < world; ++rank) {
        SCOPED_TRACE("world=" + std::to_string(world) + " rank=" + std::to_string(rank) +
                     " flags=" + std::to_string(flags));
        DataLoader full(dataset, options(world, rank, batch, split, even, drop_last));
        full.set_epoch(3);
        const std::vector<Seen> all = drain(full);
        ASSERT_EQ(all.size(), full.sharding().num_batches());
        for (std::size_t k = 0; k <= all.size(); ++k) {
          const std::vector<Seen> rest(all.begin() + static_cast<std::ptrdiff_t>(k), all.end());

          DataLoader skipping(dataset, options(world, rank, batch, split, even, drop_last));
          skipping.set_epoch(3);
          skipping.skip_first_batches(k);
          EXPECT_EQ(skipping.epoch(), 3);
          EXPECT_EQ(drain(skipping), rest) << "skip " << k;

          DataLoader first(dataset, options(world, rank, batch, split, even, drop_last));
          first.set_epoch(3);
          Batch b;
          for (std::size_t i = 0; i < k; ++i) ASSERT_TRUE(first.next(b));
          const LoaderState state = first.state();
          EXPECT_EQ(state.epoch, 3);
          EXPECT_EQ(state.position, static_cast<std::int64_t>(k));
          EXPECT_EQ(state.seed, 17u);
          // A fresh process with another configured seed: the checkpoint's seed wins.
          DataLoader resumed(dataset, options(world, rank, batch, split, even, drop_last, 999));
          resumed.load_state(state);
          EXPECT_EQ(resumed.state().seed, 17u);
          EXPECT_EQ(resumed.state().position, static_cast<std::int64_t>(k));
          EXPECT_EQ(drain(resumed), rest) << "load_state at " << k;
          EXPECT_EQ(drain(first), rest) << "uninterrupted from " << k;
        }
      }
    }
  }
}

TEST(DataLoader, StateRoundTripAndErrors) {
  auto dataset = std::make_shared<IndexDataset>(10);
  DataLoader loader(dataset, options(1, 0, 4, false, true, false, 5));
  EXPECT_EQ(loader.batches_per_epoch(), 3u);
  loader.load_state({7, 2, 11});
  const LoaderState s = loader.state();
  EXPECT_EQ(s.epoch, 7);
  EXPECT_EQ(s.position, 2);
  EXPECT_EQ(s.seed, 11u);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_TRUE(b.is_last);
  EXPECT_EQ(b.indices.size(), 2u);  // world 1: the tail batch stays short
  EXPECT_EQ(b.real_count, 2u);
  EXPECT_FALSE(loader.next(b));
  EXPECT_EQ(loader.state().epoch, 8);

  EXPECT_THROW(loader.load_state({0, 4, 11}), std::out_of_range);
  EXPECT_THROW(loader.load_state({0, -1, 11}), std::out_of_range);
  EXPECT_EQ(loader.state().epoch, 8);  // a rejected state changes nothing
  EXPECT_THROW(loader.skip_first_batches(4), std::out_of_range);
  loader.skip_first_batches(3);
  EXPECT_FALSE(loader.next(b));
  EXPECT_THROW(DataLoader(dataset, options(3, 0, 4, true, true, false)), std::invalid_argument);
  EXPECT_THROW(DataLoader(nullptr, options(1, 0, 4, false, true, false)), std::invalid_argument);
}

TEST(DataLoader, PaddingIsCountedForGather) {
  // 10 examples over 4 ranks, batch 2: global batch 8, 2 steps, 6 padding duplicates.
  auto dataset = std::make_shared<IndexDataset>(10);
  std::size_t real = 0, rows = 0;
  for (std::size_t rank = 0; rank < 4; ++rank) {
    DataLoader loader(dataset, options(4, rank, 2, false, true, false));
    for (const Seen& s : drain(loader)) {
      real += s.real_count;
      rows += s.indices.size();
    }
    EXPECT_EQ(loader.sharding().last_global_batch_real_count(), 2u);
  }
  EXPECT_EQ(real, 10u);
  EXPECT_EQ(rows, 16u);
}

}  // namespace
}  // namespace mpitrain::data
