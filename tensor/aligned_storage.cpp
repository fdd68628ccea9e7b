#include "mpitrain/tensor/aligned_storage.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace mpitrain {

void* allocate_aligned(std::size_t bytes) {
  constexpr std::size_t kCacheLine = 64;
  const std::size_t align = bytes >= kHugePageBytes ? kHugePageBytes : kCacheLine;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Advice only: where THP is off or madvise fails, the memory works the same.
  if (align == kHugePageBytes) ::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace mpitrain
