// A replacement of the global operator new that counts its calls; its own translation unit so
// the compiler never sees a malloc/free pair through inlining across the replacement.

#include "optim_alloc_counter.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<std::size_t> new_calls{0};
}  // namespace

void* operator new(std::size_t bytes) {
  new_calls.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace mpitrain::nn::testing {

std::size_t operator_new_calls() noexcept { return new_calls.load(std::memory_order_relaxed); }

}  // namespace mpitrain::nn::testing
