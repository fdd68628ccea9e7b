#pragma once
// Helpers shared by the engine tests: parameters as flat vectors, bitwise comparisons, and
// agreement across ranks.

#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/nn/parameter.hpp"
#include "mpitrain/tensor/state_dict.hpp"

namespace mpitrain::testing {

// Returns the values of `params`, concatenated in order.
std::vector<float> flatten(const std::vector<nn::Parameter*>& params);
// Returns the gradients of `params`, concatenated in order.
std::vector<float> flatten_grads(const std::vector<nn::Parameter*>& params);
// Returns true when `a` and `b` hold the same bits.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);
// Returns true when both state dicts hold the same keys, the same scalars and bit-identical
// tensors.
bool same_state(const StateDict& a, const StateDict& b);
// Returns max |a - b| / max |b| per parameter tensor, the worst over tensors.
double worst_relative_error(const std::vector<nn::Parameter*>& a, const std::vector<nn::Parameter*>& b);
// Returns true when every rank holds the same bits as rank 0. Collective.
bool identical_on_all_ranks(const Communicator& comm, const std::vector<float>& values);

}  // namespace mpitrain::testing
