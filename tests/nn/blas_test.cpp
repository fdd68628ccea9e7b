// gemm wrapper (all transpose cases against a naive product) and BLAS thread control.
#include <gtest/gtest.h>

#include <vector>

#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/nn/gemm.hpp"
#include "mpitrain/nn/rng.hpp"

namespace mpitrain::nn {
namespace {

TEST(Gemm, AllTransposeCasesMatchANaiveProduct) {
  const std::size_t m = 5, n = 4, k = 3;
  Rng rng(41);
  std::vector<float> a(m * k), b(k * n), c0(m * n);
  for (float& v : a) v = rng.uniform(-1, 1);
  for (float& v : b) v = rng.uniform(-1, 1);
  for (float& v : c0) v = rng.uniform(-1, 1);
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      // Store op(A) = a (m x k) as A^T (k x m) when transposed; likewise B.
      std::vector<float> as(a.size()), bs(b.size());
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < k; ++j)
          as[ta == Trans::yes ? j * m + i : i * k + j] = a[i * k + j];
      for (std::size_t i = 0; i < k; ++i)
        for (std::size_t j = 0; j < n; ++j)
          bs[tb == Trans::yes ? j * k + i : i * n + j] = b[i * n + j];
      std::vector<float> c = c0;
      gemm(ta, tb, m, n, k, 2.0f, as.data(), ta == Trans::yes ? m : k, bs.data(),
           tb == Trans::yes ? k : n, 0.5f, c.data(), n);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::size_t l = 0; l < k; ++l) s += double(a[i * k + l]) * b[l * n + j];
          // Three products of values below 1: 1e-6 absolute is a few float roundings.
          EXPECT_NEAR(c[i * n + j], 2.0 * s + 0.5 * c0[i * n + j], 1e-6);
        }
      }
    }
  }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> c{1.0f, 2.0f};
  gemm(Trans::no, Trans::no, 1, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 3.0f, c.data(), 2);
  EXPECT_EQ(c[0], 3.0f);
  EXPECT_EQ(c[1], 6.0f);
  gemm(Trans::no, Trans::no, 0, 2, 4, 1.0f, nullptr, 4, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c[0], 3.0f);
}

TEST(BlasThreads, SetGetAndDefaultShare) {
  const std::size_t before = blas_threads();
  set_blas_threads(1);
  EXPECT_EQ(blas_threads(), 1u);
  set_blas_threads(0);  // treated as 1
  EXPECT_EQ(blas_threads(), 1u);
  set_blas_threads(before);
  EXPECT_EQ(default_blas_threads(64, 8), 8u);
  EXPECT_EQ(default_blas_threads(6, 4), 1u);
  EXPECT_EQ(default_blas_threads(2, 8), 1u);
  EXPECT_EQ(default_blas_threads(16, 0), 16u);
  EXPECT_GE(default_blas_threads(1), 1u);
}

}  // namespace
}  // namespace mpitrain::nn
