// SharedBuffer (see shared_buffer.hpp): a handle whose end marks its memory released.

#include "mpitrain/collectives/shared_buffer.hpp"

#include <utility>

namespace mpitrain {

SharedBuffer::SharedBuffer(std::span<std::byte> bytes,
                           std::shared_ptr<std::atomic<bool>> released) noexcept
    : bytes_(bytes), released_(std::move(released)) {}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : bytes_(std::exchange(other.bytes_, {})), released_(std::move(other.released_)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    bytes_ = std::exchange(other.bytes_, {});
    released_ = std::move(other.released_);
  }
  return *this;
}

SharedBuffer::~SharedBuffer() { reset(); }

void SharedBuffer::reset() noexcept {
  // Release ordering: this rank's last writes to the memory happen before the segment, seeing
  // the flag on another thread, unmaps it.
  if (released_) released_->store(true, std::memory_order_release);
  released_.reset();
  bytes_ = {};
}

}  // namespace mpitrain
