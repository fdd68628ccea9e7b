#include "mpitrain/nn/mlp.hpp"

#include <stdexcept>
#include <string>

#include "mpitrain/nn/dropout.hpp"
#include "mpitrain/nn/linear.hpp"
#include "mpitrain/nn/rng.hpp"

namespace mpitrain::nn {

Sequential make_mlp(std::size_t in, std::span<const std::size_t> hidden, std::size_t out,
                    Activation activation, float dropout, std::uint64_t seed) {
  if (!(dropout >= 0.0f && dropout < 1.0f)) {
    throw std::invalid_argument("make_mlp: dropout " + std::to_string(dropout) +
                                " is not in [0, 1)");
  }
  bool zero_width = in == 0 || out == 0;
  for (std::size_t h : hidden) zero_width = zero_width || h == 0;
  if (zero_width) {
    throw std::invalid_argument("make_mlp: layer widths must be positive (in=" +
                                std::to_string(in) + ", out=" + std::to_string(out) + ")");
  }
  Rng init(seed, 0);
  Sequential model;
  std::size_t width = in;
  for (std::size_t h : hidden) {
    model.emplace<Linear>(width, h, true, init);
    model.add(make_activation(activation));
    if (dropout > 0.0f) model.emplace<Dropout>(dropout, seed, 1 + model.size());
    width = h;
  }
  model.emplace<Linear>(width, out, true, init);
  return model;
}

}  // namespace mpitrain::nn
