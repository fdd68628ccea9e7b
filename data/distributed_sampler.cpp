#include "mpitrain/data/distributed_sampler.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include "mpitrain/data/torch_randperm.hpp"

namespace mpitrain::data {

DistributedSampler::DistributedSampler(std::size_t dataset_size, std::size_t num_replicas,
                                       std::size_t rank, bool shuffle, std::uint64_t seed,
                                       bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas == 0) {
    throw std::invalid_argument("DistributedSampler: num_replicas must be at least 1");
  }
  if (rank >= num_replicas) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(rank) +
                                " is out of range for " + std::to_string(num_replicas) +
                                " replicas");
  }
  // torch: ceil((n - R) / R) with drop_last and n % R != 0, which is floor(n / R) (also when
  // n < R, where Python's ceil of a value in (-1, 0) is 0); otherwise ceil(n / R).
  num_samples_ =
      drop_last ? dataset_size / num_replicas : (dataset_size + num_replicas - 1) / num_replicas;
}

std::size_t DistributedSampler::real_samples() const noexcept {
  // Position of this rank's i-th index in the global list: i * R + rank; real iff < n.
  if (dataset_size_ <= rank_) return 0;
  const std::size_t below_n = (dataset_size_ - rank_ + num_replicas_ - 1) / num_replicas_;
  return below_n < num_samples_ ? below_n : num_samples_;
}

std::vector<std::size_t> DistributedSampler::global_indices() const {
  std::vector<std::size_t> order;
  if (shuffle_) {
    // torch: g.manual_seed(self.seed + self.epoch); Python ints, taken mod 2^64 by manual_seed.
    order = torch_randperm(dataset_size_, seed_ + static_cast<std::uint64_t>(epoch_));
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  const std::size_t total = total_size();
  if (total <= dataset_size_) {
    order.resize(total);
    return order;
  }
  order.reserve(total);
  for (std::size_t j = dataset_size_; j < total; ++j) order.push_back(order[j - dataset_size_]);
  return order;
}

std::vector<std::size_t> DistributedSampler::indices() const {
  const std::vector<std::size_t> global = global_indices();
  std::vector<std::size_t> mine;
  mine.reserve(num_samples_);
  for (std::size_t j = rank_; j < global.size(); j += num_replicas_) mine.push_back(global[j]);
  return mine;
}

}  // namespace mpitrain::data
