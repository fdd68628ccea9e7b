#pragma once
// Test support: counts calls of the global operator new, which optim_alloc_counter.cpp
// replaces for the whole test binary (so only binaries that link that file count).

#include <cstddef>

namespace mpitrain::nn::testing {

// Returns how many times the global operator new has been called so far.
std::size_t operator_new_calls() noexcept;

}  // namespace mpitrain::nn::testing
