#include "mpitrain/nn/init.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

// LAPACK's Fortran entry points (liblapack; LAPACKE is not required). Column-major.
extern "C" {
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work,
             const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda,
             const float* tau, float* work, const int* lwork, int* info);
}

namespace mpitrain::nn {
namespace {

std::size_t fan_for(const Tensor& t, FanMode mode) {
  const Fans f = calculate_fans(t.shape());
  return mode == FanMode::fan_in ? f.fan_in : f.fan_out;
}

void check_lapack(int info, const char* call, int m, int n) {
  if (info != 0) {
    throw std::runtime_error(std::string(call) + " failed with info=" + std::to_string(info) +
                             " for a " + std::to_string(m) + " x " + std::to_string(n) +
                             " matrix");
  }
}

}  // namespace

float calculate_gain(Nonlinearity nonlinearity, float param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::sigmoid: return 1.0f;
    case Nonlinearity::tanh: return 5.0f / 3.0f;
    case Nonlinearity::relu: return std::sqrt(2.0f);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0f / (1.0f + param * param));
  }
  return 1.0f;
}

Fans calculate_fans(const Shape& shape) {
  if (shape.size() < 2) {
    throw std::invalid_argument("calculate_fans: shape " + to_string(shape) +
                                " has fewer than 2 dimensions");
  }
  std::size_t receptive = 1;
  for (std::size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

void uniform_(Tensor& t, float lo, float hi, Rng& rng) noexcept {
  rng.fill_uniform(t.span(), lo, hi);
}

void normal_(Tensor& t, float mean, float std, Rng& rng) noexcept {
  rng.fill_normal(t.span(), mean, std);
}

void kaiming_uniform_(Tensor& t, Rng& rng, float a, FanMode mode, Nonlinearity nonlinearity) {
  if (t.empty()) return;
  const float std = calculate_gain(nonlinearity, a) /
                    std::sqrt(static_cast<float>(fan_for(t, mode)));
  const float bound = std::sqrt(3.0f) * std;
  uniform_(t, -bound, bound, rng);
}

void kaiming_normal_(Tensor& t, Rng& rng, float a, FanMode mode, Nonlinearity nonlinearity) {
  if (t.empty()) return;
  const float std = calculate_gain(nonlinearity, a) /
                    std::sqrt(static_cast<float>(fan_for(t, mode)));
  normal_(t, 0.0f, std, rng);
}

void xavier_uniform_(Tensor& t, Rng& rng, float gain) {
  const Fans f = calculate_fans(t.shape());
  const float std = gain * std::sqrt(2.0f / static_cast<float>(f.fan_in + f.fan_out));
  const float bound = std::sqrt(3.0f) * std;
  uniform_(t, -bound, bound, rng);
}

void xavier_normal_(Tensor& t, Rng& rng, float gain) {
  const Fans f = calculate_fans(t.shape());
  normal_(t, 0.0f, gain * std::sqrt(2.0f / static_cast<float>(f.fan_in + f.fan_out)), rng);
}

void orthogonal_(Tensor& t, Rng& rng, float gain) {
  if (t.rank() < 2) {
    throw std::invalid_argument("orthogonal_: shape " + to_string(t.shape()) +
                                " has fewer than 2 dimensions");
  }
  Tensor sample(t.shape());
  normal_(sample, 0.0f, 1.0f, rng);
  orthogonal_from_sample(t, sample, gain);
}

void orthogonal_from_sample(Tensor& t, const Tensor& gaussian, float gain) {
  if (t.rank() < 2 || gaussian.shape() != t.shape()) {
    throw std::invalid_argument("orthogonal_from_sample: tensor " + to_string(t.shape()) +
                                " and sample " + to_string(gaussian.shape()) +
                                " must have the same shape of 2 or more dimensions");
  }
  if (t.empty()) return;
  const std::size_t rows = t.dim(0);
  const std::size_t cols = t.numel() / rows;
  if (rows > static_cast<std::size_t>(INT_MAX) || cols > static_cast<std::size_t>(INT_MAX)) {
    throw std::length_error("orthogonal_from_sample: " + to_string(t.shape()) +
                            " exceeds LAPACK int range");
  }
  // torch factors A = sample (rows x cols) when rows >= cols, else A = sample^T, so A is
  // always m x n with m >= n. The row-major sample is, in column-major terms, the matrix
  // sample^T (cols x rows), hence the copy for the first case and none for the second.
  const bool tall = rows >= cols;
  const int m = static_cast<int>(tall ? rows : cols);
  const int n = static_cast<int>(tall ? cols : rows);
  std::vector<float> a(t.numel());  // column-major m x n, lda = m
  if (tall) {
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) a[i + j * rows] = gaussian[i * cols + j];
    }
  } else {
    std::copy_n(gaussian.data(), a.size(), a.data());
  }
  std::vector<float> tau(static_cast<std::size_t>(n));
  int info = 0;
  int lwork = -1;
  float query = 0.0f;
  sgeqrf_(&m, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
  check_lapack(info, "sgeqrf_ (workspace query)", m, n);
  lwork = std::max(1, static_cast<int>(query));
  std::vector<float> work(static_cast<std::size_t>(lwork));
  sgeqrf_(&m, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  check_lapack(info, "sgeqrf_", m, n);
  // sign(diag(R)), with sign(0) = 0 as torch's d.sign().
  std::vector<float> sign(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) {
    const float d = a[static_cast<std::size_t>(j) * static_cast<std::size_t>(m + 1)];
    sign[static_cast<std::size_t>(j)] = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
  }
  lwork = -1;
  sorgqr_(&m, &n, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
  check_lapack(info, "sorgqr_ (workspace query)", m, n);
  lwork = std::max(1, static_cast<int>(query));
  work.resize(static_cast<std::size_t>(lwork));
  sorgqr_(&m, &n, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  check_lapack(info, "sorgqr_", m, n);
  // Q (m x n, column-major) with column j scaled by sign[j]. Tall: t = Q; wide: t = Q^T,
  // whose row-major layout is Q's column-major layout.
  for (std::size_t j = 0; j < static_cast<std::size_t>(n); ++j) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(m); ++i) {
      const float q = a[i + j * static_cast<std::size_t>(m)] * sign[j] * gain;
      if (tall) {
        t[i * cols + j] = q;
      } else {
        t[i + j * static_cast<std::size_t>(m)] = q;
      }
    }
  }
}

void linear_default_init(Tensor& weight, Tensor* bias, Rng& rng) {
  kaiming_uniform_(weight, rng, std::sqrt(5.0f));
  if (bias != nullptr) {
    const std::size_t fan_in = calculate_fans(weight.shape()).fan_in;
    const float bound = fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
    uniform_(*bias, -bound, bound, rng);
  }
}

}  // namespace mpitrain::nn
