#pragma once
// BatchSharding: the batches of dataset indices each rank reads in one epoch, as a pure
// function of (dataset size, world, rank, batch size, shuffle, seed, epoch, drop_last,
// split_batches, even_batches). The engine's DataLoader iterates it; tests check it
// exhaustively.
//
// Mode `accelerate` (default) follows Hugging Face Accelerate's prepared DataLoader:
// order = torch_randperm(n, seed + epoch) when shuffling (Accelerate's SeedableRandomSampler,
// use_seedable_sampler=True; equal to torch's RandomSampler with a generator seeded
// seed + epoch), else 0..n-1; a BatchSampler cuts it into global batches; BatchSamplerShard
// gives each rank its part. With
//   G = global batch = batch_size * world  (split_batches: batch_size, which world divides)
//   b = rank batch   = batch_size          (split_batches: batch_size / world)
// global batch g holds stream positions [g*G, (g+1)*G) and rank r takes the b positions
// starting at g*G + r*b (split_batches=false: BatchSampler batch g*world + r goes to rank r;
// split_batches=true: each global batch is cut in world slices; both give that formula).
//   - drop_last: only complete global batches, floor(n / G) of them; the whole tail is
//     dropped, including full per-rank batches of an incomplete last round (as Accelerate).
//   - even_batches (and not drop_last): ceil(n / G) global batches; positions t >= n wrap
//     around to order[t % n] (Accelerate's loop back to the first samples, repeated when
//     n < G), so every rank gets the same number of full batches.
//   - neither: ceil(n / G) global batches without wrap-around; a rank's last batch may be
//     short, and a rank whose slice of the last global batch is empty gets one batch fewer.
//   - world_size 1: Accelerate's prepare_data_loader shards nothing on one process, so
//     even_batches has no effect there (the last batch stays short, as in torch's DataLoader).
// This equals BatchSamplerShard's iteration (accelerate data_loader.py) for every case; the
// tests hold Accelerate's own expected shards and an independent simulation of its loop.
//
// Mode `distributed_sampler` is the PyTorch DDP recipe: DistributedSampler(shuffle, seed,
// drop_last) per rank, then batches of batch_size with the same drop_last. split_batches
// is rejected; even_batches has no effect (the sampler pads every rank to the same count).
//
// Padding duplicates are always the tail of a batch: real_counts[i] says how many leading
// samples of batch i are real; gather_for_metrics keeps those. In accelerate mode, the
// concatenation of the ranks' batches of global batch g (rank order) is stream positions
// [g*G, (g+1)*G): its first last_global_batch_real_count() samples are real, as
// Accelerate's GradientState.remainder says.
// Cost: epoch_batches() is O(n) time and memory (the permutation); the counts are O(1),
// except real_samples_per_epoch() and last_global_batch_real_count() in distributed_sampler
// mode, O(world * batches).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpitrain::data {

enum class ShardingMode { accelerate, distributed_sampler };

struct ShardingOptions {
  std::size_t dataset_size = 0;
  std::size_t world_size = 1;
  std::size_t rank = 0;
  std::size_t batch_size = 1;  // examples per rank; the global batch when split_batches
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  bool split_batches = false;
  bool even_batches = true;
  ShardingMode mode = ShardingMode::accelerate;
};

// One rank's batches of one epoch.
struct EpochBatches {
  std::vector<std::vector<std::size_t>> batches;  // dataset indices, in reading order
  std::vector<std::size_t> real_counts;           // per batch: its leading real samples
};

class BatchSharding {
 public:
  // Throws std::invalid_argument: world_size 0, rank >= world_size, batch_size 0,
  // split_batches with batch_size not a multiple of world_size, or split_batches in
  // distributed_sampler mode.
  explicit BatchSharding(ShardingOptions options);

  const ShardingOptions& options() const noexcept { return options_; }
  // Returns b: the size of a full batch on one rank.
  std::size_t rank_batch_size() const noexcept;
  // Returns G: the examples of one step over all ranks (b * world_size).
  std::size_t global_batch_size() const noexcept;

  // Returns the number of batches options().rank reads per epoch.
  std::size_t num_batches() const noexcept { return num_batches(options_.rank); }
  // Returns the number of batches `rank` reads per epoch (differs between ranks only with
  // even_batches=false and drop_last=false).
  std::size_t num_batches(std::size_t rank) const noexcept;
  // Returns the largest num_batches(rank) over all ranks.
  std::size_t max_num_batches() const noexcept;
  // Returns the real (non-duplicate) examples all ranks read per epoch together: n, or
  // fewer when drop_last drops the tail.
  std::size_t real_samples_per_epoch() const noexcept;
  // Returns the real examples in the epoch's last step over all ranks (accelerate mode:
  // the last global batch), 0 when the epoch is empty.
  std::size_t last_global_batch_real_count() const noexcept;

  // Returns options().rank's batches for `epoch` (the shuffle seed is seed + epoch).
  EpochBatches epoch_batches(std::int64_t epoch) const;

 private:
  // Returns true when accelerate mode completes the last global batch from the start.
  bool wraps_around() const noexcept;
  EpochBatches accelerate_batches(std::int64_t epoch) const;
  EpochBatches sampler_batches(std::int64_t epoch) const;
  // distributed_sampler mode: real samples of `rank` and the count in its batch `i`.
  std::size_t sampler_real_in_batch(std::size_t rank, std::size_t i) const noexcept;

  ShardingOptions options_;
};

}  // namespace mpitrain::data
