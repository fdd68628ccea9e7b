#pragma once
// DistributedSampler: which examples one rank reads in one epoch, with the semantics of
// torch.utils.data.DistributedSampler (torch 1.13), index for index:
//   - the epoch's order is torch_randperm(n, seed + epoch) when shuffling, else 0..n-1,
//     identical on every rank;
//   - without drop_last the list is padded to total_size = ceil(n / R) * R by repeating it
//     from the start (as many times as needed, so position j holds order[j % n]);
//     with drop_last it is cut to total_size = floor(n / R) * R;
//   - rank r takes positions r, r + R, r + 2R, ... (num_samples = total_size / R of them).
// Positions >= n are padding duplicates; they are the tail of every rank's list, and
// real_samples() counts the ones before them (what gather_for_metrics keeps).
// Cost: indices() is O(n) time and memory (the permutation); everything else is O(1).

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpitrain::data {

class DistributedSampler {
 public:
  // Throws std::invalid_argument when num_replicas is 0 or rank >= num_replicas.
  DistributedSampler(std::size_t dataset_size, std::size_t num_replicas, std::size_t rank,
                     bool shuffle = true, std::uint64_t seed = 0, bool drop_last = false);

  // Selects the epoch whose order indices() returns (torch: sampler.set_epoch(epoch)).
  void set_epoch(std::int64_t epoch) noexcept { epoch_ = epoch; }
  std::int64_t epoch() const noexcept { return epoch_; }

  std::size_t dataset_size() const noexcept { return dataset_size_; }
  std::size_t num_replicas() const noexcept { return num_replicas_; }
  std::size_t rank() const noexcept { return rank_; }
  bool shuffle() const noexcept { return shuffle_; }
  std::uint64_t seed() const noexcept { return seed_; }
  bool drop_last() const noexcept { return drop_last_; }

  // Returns the number of indices per rank per epoch (torch: len(sampler)).
  std::size_t num_samples() const noexcept { return num_samples_; }
  // Returns num_samples() * num_replicas(): the padded (or cut) global list's length.
  std::size_t total_size() const noexcept { return num_samples_ * num_replicas_; }
  // Returns how many of this rank's indices are real examples (the leading ones); the
  // remaining num_samples() - real_samples() repeat examples another position already has.
  std::size_t real_samples() const noexcept;

  // Returns the padded or cut global list of the current epoch (total_size() indices),
  // identical on every rank.
  std::vector<std::size_t> global_indices() const;
  // Returns this rank's indices for the current epoch: global_indices()[rank::num_replicas].
  std::vector<std::size_t> indices() const;

 private:
  std::size_t dataset_size_;
  std::size_t num_replicas_;
  std::size_t rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t epoch_ = 0;
  std::size_t num_samples_;
};

}  // namespace mpitrain::data
