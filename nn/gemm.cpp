#include "mpitrain/nn/gemm.hpp"

#include <cblas.h>

#include <climits>
#include <stdexcept>
#include <string>

namespace mpitrain::nn {

void gemm(Trans trans_a, Trans trans_b, std::size_t m, std::size_t n, std::size_t k,
          float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
          float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  for (std::size_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > static_cast<std::size_t>(INT_MAX)) {
      throw std::length_error("gemm: size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                              " k=" + std::to_string(k) + " exceeds BLAS int range");
    }
  }
  if (k == 0) {
    // BLAS may reject lda = 0; the product is empty, so only the scaling of C remains.
    for (std::size_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      for (std::size_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace mpitrain::nn
