#include "mpitrain/data/batch_sharding.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "mpitrain/data/distributed_sampler.hpp"
#include "mpitrain/data/torch_randperm.hpp"

namespace mpitrain::data {
namespace {

std::size_t ceil_div(std::size_t a, std::size_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

BatchSharding::BatchSharding(ShardingOptions options) : options_(options) {
  const auto& o = options_;
  if (o.world_size == 0) throw std::invalid_argument("BatchSharding: world_size must be >= 1");
  if (o.rank >= o.world_size) {
    throw std::invalid_argument("BatchSharding: rank " + std::to_string(o.rank) +
                                " is out of range for world_size " + std::to_string(o.world_size));
  }
  if (o.batch_size == 0) throw std::invalid_argument("BatchSharding: batch_size must be >= 1");
  if (o.split_batches && o.mode == ShardingMode::distributed_sampler) {
    throw std::invalid_argument(
        "BatchSharding: split_batches is not available with the distributed_sampler mode "
        "(its batch_size is per rank)");
  }
  if (o.split_batches && o.batch_size % o.world_size != 0) {
    throw std::invalid_argument(
        "BatchSharding: with split_batches the batch size (" + std::to_string(o.batch_size) +
        ") must be a multiple of the number of ranks (" + std::to_string(o.world_size) + ")");
  }
}

std::size_t BatchSharding::rank_batch_size() const noexcept {
  return options_.split_batches ? options_.batch_size / options_.world_size : options_.batch_size;
}

std::size_t BatchSharding::global_batch_size() const noexcept {
  return rank_batch_size() * options_.world_size;
}

std::size_t BatchSharding::num_batches(std::size_t rank) const noexcept {
  const auto& o = options_;
  const std::size_t n = o.dataset_size;
  if (o.mode == ShardingMode::distributed_sampler) {
    const std::size_t per_rank = o.drop_last ? n / o.world_size : ceil_div(n, o.world_size);
    return o.drop_last ? per_rank / o.batch_size : ceil_div(per_rank, o.batch_size);
  }
  const std::size_t g = global_batch_size();
  if (o.drop_last) return n / g;
  if (wraps_around()) return ceil_div(n, g);
  const std::size_t full = n / g;
  const std::size_t rest = n - full * g;  // examples in the incomplete last global batch
  return full + (rest > rank * rank_batch_size() ? 1 : 0);
}

bool BatchSharding::wraps_around() const noexcept {
  // One process: Accelerate leaves the batch sampler unsharded, so nothing wraps.
  return !options_.drop_last && options_.even_batches && options_.world_size > 1;
}

std::size_t BatchSharding::max_num_batches() const noexcept { return num_batches(0); }

std::size_t BatchSharding::sampler_real_in_batch(std::size_t rank, std::size_t i) const noexcept {
  const auto& o = options_;
  const DistributedSampler sampler(o.dataset_size, o.world_size, rank, o.shuffle, o.seed,
                                   o.drop_last);
  const std::size_t begin = i * o.batch_size;
  const std::size_t end = std::min(begin + o.batch_size, sampler.num_samples());
  const std::size_t real = sampler.real_samples();
  if (real <= begin || end <= begin) return 0;
  return std::min(real, end) - begin;
}

std::size_t BatchSharding::real_samples_per_epoch() const noexcept {
  const auto& o = options_;
  if (o.mode == ShardingMode::accelerate) {
    if (o.drop_last) return o.dataset_size / global_batch_size() * global_batch_size();
    return o.dataset_size;
  }
  std::size_t total = 0;
  for (std::size_t r = 0; r < o.world_size; ++r) {
    for (std::size_t i = 0; i < num_batches(r); ++i) total += sampler_real_in_batch(r, i);
  }
  return total;
}

std::size_t BatchSharding::last_global_batch_real_count() const noexcept {
  const auto& o = options_;
  const std::size_t steps = max_num_batches();
  if (steps == 0) return 0;
  if (o.mode == ShardingMode::accelerate) {
    const std::size_t g = global_batch_size();
    return std::min(g, o.dataset_size - (steps - 1) * g);
  }
  std::size_t total = 0;
  for (std::size_t r = 0; r < o.world_size; ++r) total += sampler_real_in_batch(r, steps - 1);
  return total;
}

EpochBatches BatchSharding::epoch_batches(std::int64_t epoch) const {
  return options_.mode == ShardingMode::accelerate ? accelerate_batches(epoch)
                                                   : sampler_batches(epoch);
}

EpochBatches BatchSharding::accelerate_batches(std::int64_t epoch) const {
  const auto& o = options_;
  const std::size_t n = o.dataset_size;
  EpochBatches out;
  const std::size_t count = num_batches(o.rank);
  if (count == 0) return out;
  std::vector<std::size_t> order;
  if (o.shuffle) {
    order = torch_randperm(n, o.seed + static_cast<std::uint64_t>(epoch));
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  const std::size_t g = global_batch_size();
  const std::size_t b = rank_batch_size();
  const bool wrap = wraps_around();
  out.batches.reserve(count);
  out.real_counts.reserve(count);
  for (std::size_t step = 0; step < count; ++step) {
    const std::size_t begin = step * g + o.rank * b;
    // Without wrap-around a slice stops at n; num_batches() already left out empty ones.
    const std::size_t end = wrap ? begin + b : std::min(begin + b, n);
    std::vector<std::size_t> batch;
    batch.reserve(end - begin);
    for (std::size_t t = begin; t < end; ++t) batch.push_back(order[t % n]);
    out.real_counts.push_back(begin >= n ? 0 : std::min(end, n) - begin);
    out.batches.push_back(std::move(batch));
  }
  return out;
}

EpochBatches BatchSharding::sampler_batches(std::int64_t epoch) const {
  const auto& o = options_;
  DistributedSampler sampler(o.dataset_size, o.world_size, o.rank, o.shuffle, o.seed, o.drop_last);
  sampler.set_epoch(epoch);
  const std::vector<std::size_t> mine = sampler.indices();
  EpochBatches out;
  const std::size_t count = num_batches(o.rank);
  out.batches.reserve(count);
  out.real_counts.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t begin = i * o.batch_size;
    const std::size_t end = std::min(begin + o.batch_size, mine.size());
    out.batches.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(begin),
                             mine.begin() + static_cast<std::ptrdiff_t>(end));
    out.real_counts.push_back(sampler_real_in_batch(o.rank, i));
  }
  return out;
}

}  // namespace mpitrain::data
