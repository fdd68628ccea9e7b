#include "mpitrain/nn/rng.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace mpitrain::nn {
namespace {

constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

std::uint32_t lo32(std::uint64_t v) noexcept { return static_cast<std::uint32_t>(v); }
std::uint32_t hi32(std::uint64_t v) noexcept { return static_cast<std::uint32_t>(v >> 32); }

// Returns the scalar `key` of `state` as an integer in [0, 2^32).
std::uint64_t read_u32(const StateDict& state, const std::string& key) {
  const auto it = state.scalars.find(key);
  if (it == state.scalars.end()) {
    throw std::invalid_argument("Rng::load_state_dict: missing scalar '" + key + "'");
  }
  const double v = it->second;
  if (!(v >= 0.0 && v < 4294967296.0) || v != std::floor(v)) {
    throw std::invalid_argument("Rng::load_state_dict: scalar '" + key + "' = " +
                                std::to_string(v) + " is not a 32-bit unsigned integer");
  }
  return static_cast<std::uint64_t>(v);
}

}  // namespace

Rng::Rng(std::uint64_t seed, std::uint64_t stream) noexcept : seed_(seed), stream_(stream) {}

std::array<std::uint32_t, 4> Rng::philox(std::array<std::uint32_t, 4> c,
                                         std::array<std::uint32_t, 2> k) noexcept {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    c = {hi32(p1) ^ c[1] ^ k[0], lo32(p1), hi32(p0) ^ c[3] ^ k[1], lo32(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

void Rng::refill() noexcept {
  const std::uint64_t block = position_ >> 2;
  block_ = philox({lo32(block), hi32(block), lo32(stream_), hi32(stream_)},
                  {lo32(seed_), hi32(seed_)});
}

std::uint64_t Rng::next_u64() noexcept {
  const std::uint64_t lo = next_u32();
  const std::uint64_t hi = next_u32();
  return lo | (hi << 32);
}

float Rng::normal() noexcept {
  // u1 in (0, 1) so the logarithm is finite; u2 in [0, 1).
  const double u1 = (static_cast<double>(next_u32()) + 0.5) * 0x1.0p-32;
  const double u2 = static_cast<double>(next_u32()) * 0x1.0p-32;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                            std::cos(2.0 * std::numbers::pi * u2));
}

void Rng::fill_u32(std::span<std::uint32_t> out) noexcept {
  std::size_t i = 0;
  const std::size_t n = out.size();
  while (i < n && (position_ & 3u) != 0) out[i++] = next_u32();
  // Whole blocks, kGroup at a time, as structure-of-arrays so each round is one vector loop.
  constexpr std::size_t kGroup = 8;
  const std::array<std::uint32_t, 2> key0{lo32(seed_), hi32(seed_)};
  while (n - i >= 4 * kGroup) {
    std::uint32_t c0[kGroup], c1[kGroup], c2[kGroup], c3[kGroup];
    const std::uint64_t first = position_ >> 2;
    for (std::size_t j = 0; j < kGroup; ++j) {
      c0[j] = lo32(first + j);
      c1[j] = hi32(first + j);
      c2[j] = lo32(stream_);
      c3[j] = hi32(stream_);
    }
    std::uint32_t k0 = key0[0], k1 = key0[1];
    for (int round = 0; round < 10; ++round) {
      for (std::size_t j = 0; j < kGroup; ++j) {
        const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0[j];
        const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2[j];
        const std::uint32_t n0 = hi32(p1) ^ c1[j] ^ k0;
        const std::uint32_t n2 = hi32(p0) ^ c3[j] ^ k1;
        c1[j] = lo32(p1);
        c3[j] = lo32(p0);
        c0[j] = n0;
        c2[j] = n2;
      }
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    for (std::size_t j = 0; j < kGroup; ++j) {
      out[i + 4 * j] = c0[j];
      out[i + 4 * j + 1] = c1[j];
      out[i + 4 * j + 2] = c2[j];
      out[i + 4 * j + 3] = c3[j];
    }
    i += 4 * kGroup;
    position_ += 4 * kGroup;
  }
  while (i < n) out[i++] = next_u32();
}

void Rng::fill_uniform(std::span<float> out, float lo, float hi) noexcept {
  for (float& v : out) v = uniform(lo, hi);
}

void Rng::fill_normal(std::span<float> out, float mean, float std) noexcept {
  for (float& v : out) v = mean + std * normal();
}

void Rng::skip(std::uint64_t n) noexcept {
  position_ += n;
  if ((position_ & 3u) != 0) refill();
}

StateDict Rng::state_dict() const {
  StateDict s;
  s.scalars["seed_lo"] = lo32(seed_);
  s.scalars["seed_hi"] = hi32(seed_);
  s.scalars["stream_lo"] = lo32(stream_);
  s.scalars["stream_hi"] = hi32(stream_);
  s.scalars["position_lo"] = lo32(position_);
  s.scalars["position_hi"] = hi32(position_);
  return s;
}

void Rng::load_state_dict(const StateDict& state) {
  const std::uint64_t seed = read_u32(state, "seed_lo") | (read_u32(state, "seed_hi") << 32);
  const std::uint64_t stream =
      read_u32(state, "stream_lo") | (read_u32(state, "stream_hi") << 32);
  const std::uint64_t position =
      read_u32(state, "position_lo") | (read_u32(state, "position_hi") << 32);
  seed_ = seed;
  stream_ = stream;
  position_ = position;
  if ((position_ & 3u) != 0) refill();
}

}  // namespace mpitrain::nn
