#pragma once
// Rng: a seeded, splittable, exactly restorable random stream (Philox4x32-10).
//
// Philox (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) is a
// counter-based generator: block b of stream s under seed k is Philox(counter = (b, s),
// key = k), four 32-bit words per block. So
//   - streams are independent by construction: give each rank, layer or data worker its own
//     `stream` number (split) under one seed, no seeding tricks needed;
//   - the whole state is three integers (seed, stream, position), so a checkpoint stores it
//     and a restored stream continues with exactly the numbers the original would have drawn;
//   - skipping ahead is O(1).
// Cost: one block (10 rounds of two 32x32->64 multiplies) per four 32-bit outputs.
// There is no global generator: whoever needs randomness owns or borrows an Rng.
// The numbers are not torch's (parity tests load torch's initial weights from golden data).

#include <array>
#include <cstdint>
#include <span>

#include "mpitrain/tensor/state_dict.hpp"

namespace mpitrain::nn {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0, std::uint64_t stream = 0) noexcept;

  // Returns the next 32 random bits.
  std::uint32_t next_u32() noexcept {
    if ((position_ & 3u) == 0) refill();
    return block_[position_++ & 3u];
  }
  // Returns the next 64 random bits (two 32-bit draws, first one in the low half).
  std::uint64_t next_u64() noexcept;
  // Returns a float uniform in [0, 1) on a grid of 2^-24 (one 32-bit draw).
  float uniform() noexcept { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }
  // Returns a float uniform in [lo, hi) (one 32-bit draw).
  float uniform(float lo, float hi) noexcept { return lo + (hi - lo) * uniform(); }
  // Returns a standard normal sample (Box-Muller in double; two 32-bit draws, no caching so
  // the state stays three integers).
  float normal() noexcept;
  // Fills `out` with the next out.size() 32-bit draws, exactly as that many next_u32()
  // calls would, but whole blocks are computed eight at a time in a loop the compiler
  // vectorises (the bulk path of dropout masks).
  void fill_u32(std::span<std::uint32_t> out) noexcept;
  // Fills `out` with uniform [lo, hi) values (one draw each, in order).
  void fill_uniform(std::span<float> out, float lo, float hi) noexcept;
  // Fills `out` with normal(mean, std) values (two draws each, in order).
  void fill_normal(std::span<float> out, float mean, float std) noexcept;

  // Returns a generator for stream `stream` under the same seed, at position 0.
  Rng split(std::uint64_t stream) const noexcept { return Rng(seed_, stream); }
  // Advances by `n` 32-bit draws in O(1).
  void skip(std::uint64_t n) noexcept;

  std::uint64_t seed() const noexcept { return seed_; }
  std::uint64_t stream() const noexcept { return stream_; }
  // Returns the number of 32-bit draws made so far.
  std::uint64_t position() const noexcept { return position_; }

  // Returns the state as scalars seed_lo/seed_hi/stream_lo/stream_hi/position_lo/position_hi
  // (32-bit halves, exact in a double).
  StateDict state_dict() const;
  // Restores a state written by state_dict(); throws std::invalid_argument naming a missing
  // or non-integer key.
  void load_state_dict(const StateDict& state);

  // Returns Philox4x32-10 of `counter` under `key` (exposed for known-answer tests).
  static std::array<std::uint32_t, 4> philox(std::array<std::uint32_t, 4> counter,
                                             std::array<std::uint32_t, 2> key) noexcept;

 private:
  void refill() noexcept;  // computes the block holding position_
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t position_ = 0;
  std::array<std::uint32_t, 4> block_{};
};

}  // namespace mpitrain::nn
