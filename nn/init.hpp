#pragma once
// Initialisers following torch.nn.init, drawing from an explicit Rng (no global generator).
//
// Shapes follow torch: a weight is (fan_out, fan_in, receptive...) so fan_in = dim(1) *
// receptive field and fan_out = dim(0) * receptive field. Values come from our Rng, so they
// follow torch's distributions but are not torch's numbers.
// Cost: one or two 32-bit draws per value; orthogonal_ adds a QR factorisation
// (about 2*m*n^2 flops for an m x n matrix with m >= n, LAPACK sgeqrf + sorgqr).

#include <cstddef>

#include "mpitrain/nn/rng.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn {

enum class Nonlinearity { linear, sigmoid, tanh, relu, leaky_relu };
enum class FanMode { fan_in, fan_out };

struct Fans {
  std::size_t fan_in = 0;
  std::size_t fan_out = 0;
};

// Returns torch.nn.init.calculate_gain(nonlinearity, param): 1 for linear and sigmoid,
// 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + param^2)) for leaky_relu (param = slope).
float calculate_gain(Nonlinearity nonlinearity, float param = 0.01f);
// Returns fan_in and fan_out of a tensor of `shape`; throws std::invalid_argument for fewer
// than two dimensions (torch's rule).
Fans calculate_fans(const Shape& shape);

// Fills `t` with U(lo, hi).
void uniform_(Tensor& t, float lo, float hi, Rng& rng) noexcept;
// Fills `t` with N(mean, std^2).
void normal_(Tensor& t, float mean, float std, Rng& rng) noexcept;
// Fills `t` with U(-b, b), b = gain(nonlinearity, a) * sqrt(3 / fan).
void kaiming_uniform_(Tensor& t, Rng& rng, float a = 0.0f, FanMode mode = FanMode::fan_in,
                      Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// Fills `t` with N(0, std^2), std = gain(nonlinearity, a) / sqrt(fan).
void kaiming_normal_(Tensor& t, Rng& rng, float a = 0.0f, FanMode mode = FanMode::fan_in,
                     Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// Fills `t` with U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t, Rng& rng, float gain = 1.0f);
// Fills `t` with N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_normal_(Tensor& t, Rng& rng, float gain = 1.0f);
// Fills `t` (viewed as dim(0) x rest) with a (semi-)orthogonal matrix times `gain`: the Q of
// the QR factorisation of a standard normal sample, as torch.nn.init.orthogonal_ does.
void orthogonal_(Tensor& t, Rng& rng, float gain = 1.0f);
// Fills `t` with gain * Q, where Q is torch's orthogonal_ result for the given Gaussian
// sample `gaussian` (same shape as `t`): the QR factor of the sample (of its transpose when
// dim(0) < rest), columns multiplied by sign(diag(R)). Deterministic; orthogonal_ calls it
// with a fresh sample, and tests compare it with torch on the same sample.
void orthogonal_from_sample(Tensor& t, const Tensor& gaussian, float gain = 1.0f);

// Initialises a Linear layer's parameters like torch's nn.Linear.reset_parameters: weight
// (out, in) from kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), then bias
// (out) from U(-1/sqrt(in), 1/sqrt(in)). `bias` may be null.
void linear_default_init(Tensor& weight, Tensor* bias, Rng& rng);

}  // namespace mpitrain::nn
