#pragma once
// Helpers of the nn tests: tolerant tensor comparison and finite-difference gradient checks.

#include <functional>
#include <string>

#include "mpitrain/nn/module.hpp"
#include "mpitrain/nn/rng.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn::testing {

// Adds a GoogleTest failure (naming `what`, the first mismatching indices, and the worst
// error) unless shapes are equal and every element satisfies
//   |actual - expected| <= rtol * |expected| + rtol * max_i |expected_i|.
// The second term is an absolute floor scaled to the tensor: an entry that cancels to near
// zero (a dot product of larger terms) keeps the absolute rounding error of those terms,
// which no purely elementwise relative tolerance can bound.
void expect_close(const Tensor& actual, const Tensor& expected, double rtol,
                  const std::string& what);

// Returns a tensor of `shape` with values U(lo, hi) from `rng`.
Tensor random_tensor(Shape shape, Rng& rng, float lo = -1.0f, float hi = 1.0f);
// Returns a copy (owning) of `t`.
Tensor copy_of(const Tensor& t);

// Checks module.backward against central differences of L(x, params) = sum_i y_i * r_i,
// r a fixed random projection: the input gradient (if the module returns one) and every
// parameter gradient. Differences use step `h` in float with L summed in double;
// tolerance as expect_close with rtol `tol` (callers state why their tol fits their h).
// `before_forward` runs before every forward (e.g. to replay a dropout stream).
void check_gradients(Module& module, const Tensor& x, float h, double tol,
                     const std::function<void()>& before_forward = {});

}  // namespace mpitrain::nn::testing
