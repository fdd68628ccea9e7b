#pragma once
// gemm: the one place nn/ calls BLAS (OpenBLAS cblas_sgemm), row-major.
//
// Cost: 2*m*n*k flops, run by OpenBLAS on blas_threads() threads. Keeping every product
// behind this function lets benchmarks time GEMM separately from the rest of a step and
// checks in one place that sizes fit BLAS's int arguments.

#include <cstddef>

namespace mpitrain::nn {

enum class Trans : bool { no = false, yes = true };

// Computes C = alpha * op(A) * op(B) + beta * C, all row-major, where op(A) is (m, k),
// op(B) is (k, n) and C is (m, n); lda/ldb/ldc are row strides in elements. With k == 0,
// C becomes beta * C. Throws std::length_error naming the sizes if one exceeds INT_MAX.
void gemm(Trans trans_a, Trans trans_b, std::size_t m, std::size_t n, std::size_t k,
          float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
          float beta, float* c, std::size_t ldc);

}  // namespace mpitrain::nn
