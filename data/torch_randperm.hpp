#pragma once
// torch_randperm: the permutation torch.randperm(n, generator=g) returns on CPU after
// g.manual_seed(seed), reproduced bit for bit (torch 1.13, checked against golden data from
// tests/data/golden/make_sampler_golden.py). DistributedSampler and the Accelerate-style
// batch sharding both shuffle with it, so a run shuffles exactly as its PyTorch twin.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpitrain::data {

// Returns a permutation of 0..n-1 equal to torch 1.13's CPU
// `g = torch.Generator(); g.manual_seed(seed); torch.randperm(n, generator=g)`.
//
// Torch 1.13's algorithm for every n: an mt19937 seeded with the low 32 bits of `seed`
// (at::mt19937 keeps only those), then for i = 0..n-2: z = mt() % (n - i) with one 32-bit
// draw, swap(p[i], p[i + z]). Python's manual_seed(s) for a negative s takes s mod 2^64, so
// pass static_cast<std::uint64_t>(s).
// Newer torch releases (2.x) keep this algorithm for n < (2^32 - 1) / 20 = 214,748,364 and
// switch to 64-bit draws above; we follow 1.13 everywhere, so for n >= 214,748,364 our
// permutation equals 1.13's but not that of torch releases with the 64-bit path.
// Cost: O(n) time, n * sizeof(size_t) bytes.
std::vector<std::size_t> torch_randperm(std::size_t n, std::uint64_t seed);

}  // namespace mpitrain::data
