#pragma once
// make_mlp: the trainer's multi-layer perceptron, the equivalent of
//   torch.nn.Sequential(Linear(in, h0), Act(), [Dropout(p)], Linear(h0, h1), Act(),
//                       [Dropout(p)], ..., Linear(h_last, out))
// Parameter names are torch's: without dropout "0.weight 0.bias 2.weight 2.bias 4.weight
// 4.bias" for two hidden layers; with dropout > 0 a Dropout follows every activation, so a
// hidden layer takes three indices: "0.*, 3.*, 6.*" for two hidden layers.
// Randomness: the Linear layers are initialised in order (weight, then bias) like torch's
// defaults from Rng(seed, stream 0); the Dropout at child index i draws from
// Rng(seed, stream 1 + i). For different masks per rank, replace the Dropout streams with
// Dropout::set_rng (e.g. Rng(seed).split(...rank...)).

#include <cstddef>
#include <cstdint>
#include <span>

#include "mpitrain/nn/activation.hpp"
#include "mpitrain/nn/sequential.hpp"

namespace mpitrain::nn {

// Returns the MLP in -> hidden[0] -> ... -> hidden.back() -> out (no hidden layer: one
// Linear). Throws std::invalid_argument if a width is 0 or dropout is outside [0, 1).
Sequential make_mlp(std::size_t in, std::span<const std::size_t> hidden, std::size_t out,
                    Activation activation = Activation::relu, float dropout = 0.0f,
                    std::uint64_t seed = 0);

}  // namespace mpitrain::nn
