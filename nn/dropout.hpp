#pragma once
// Dropout(p), torch.nn.Dropout: in training mode each value is kept with probability 1 - p
// and scaled by 1 / (1 - p) (inverted dropout), otherwise zeroed; in evaluation mode, or
// with p = 0, it is the identity. p = 1 zeroes everything. Any shape.
//
// Randomness: the layer owns an Rng stream, seeded by the caller (constructor or set_rng),
// and draws one 32-bit number per value per training forward, in row-major order. Give each
// rank / layer its own stream (Rng::split) and checkpoint rng().state_dict() to resume with
// the same masks. A value is kept when its draw, mapped to [0, 1) as Rng::uniform() does,
// is below 1 - p. The masks are not torch's numbers (different generator).
// Cost: one draw and one multiply per value forward, one multiply per value backward; the
// mask is kept. No parameters. Under bf16/fp16 the output and dx are rounded.

#include <cstdint>
#include <vector>

#include "mpitrain/nn/module.hpp"
#include "mpitrain/nn/rng.hpp"

namespace mpitrain::nn {

class Dropout : public Module {
 public:
  // Throws std::invalid_argument unless 0 <= p <= 1.
  explicit Dropout(float p = 0.5f, std::uint64_t seed = 0, std::uint64_t stream = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  void forward_into(const Tensor& x, Tensor& out) override;
  void backward_into(const Tensor& grad_out, Tensor& grad_in) override;

  std::vector<std::pair<std::string, Rng*>> random_streams() override { return {{"", &rng_}}; }

  float p() const noexcept { return p_; }
  // Replaces the random stream (e.g. Rng(seed).split(rank)).
  void set_rng(Rng rng) noexcept { rng_ = rng; }
  Rng& rng() noexcept { return rng_; }
  const Rng& rng() const noexcept { return rng_; }

 private:
  float p_;
  Rng rng_;
  bool forwarded_ = false;
  bool identity_ = true;  // whether the last forward was the identity
  Shape shape_;           // the last forward's shape
  Tensor mask_;           // 0 or 1/(1-p) per value of the last training forward
  std::vector<std::uint32_t> bits_;  // scratch: the random draws of one forward
};

}  // namespace mpitrain::nn
