#include "mpitrain/nn/blas_threads.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <thread>

namespace mpitrain::nn {

void set_blas_threads(std::size_t threads) noexcept {
  const std::size_t n = std::clamp<std::size_t>(threads, 1, static_cast<std::size_t>(INT_MAX));
  openblas_set_num_threads(static_cast<int>(n));
}

std::size_t blas_threads() noexcept {
  return static_cast<std::size_t>(std::max(1, openblas_get_num_threads()));
}

std::size_t default_blas_threads(std::size_t cores_on_node, std::size_t ranks_on_node) noexcept {
  return std::max<std::size_t>(1, cores_on_node / std::max<std::size_t>(1, ranks_on_node));
}

std::size_t default_blas_threads(std::size_t ranks_on_node) noexcept {
  return default_blas_threads(std::max(1u, std::thread::hardware_concurrency()), ranks_on_node);
}

std::string blas_library_info() {
  std::string info = openblas_get_config();
  info += "; core ";
  info += openblas_get_corename();
  return info;
}

}  // namespace mpitrain::nn
