#pragma once
// SharedBuffer: memory in the node's shared segment (Communicator::allocate_shared), owned by
// this handle.
//
// Destroying the handle (or reset()) releases the memory without an MPI call, so it may
// happen on any thread, in a destructor, and at a different time on each rank. The memory
// goes back to the system at the next allocate_shared on the same communicator (collective
// over the node) once every rank of the node has released its handle to it, or when the
// communicator is destroyed. Until then peers may still read it in place: release a buffer
// only after the last collective that uses it has completed on this rank.

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>

namespace mpitrain {

class SharedBuffer {
 public:
  SharedBuffer() noexcept = default;  // no memory
  // For collectives/: `bytes` of the segment, released by setting `*released`.
  SharedBuffer(std::span<std::byte> bytes, std::shared_ptr<std::atomic<bool>> released) noexcept;
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer();

  // Returns this rank's memory: 64-byte aligned, zero-filled when allocated, at the same
  // offset of the segment on every rank (empty when there is none).
  std::span<std::byte> bytes() const noexcept { return bytes_; }
  // Releases the memory now, as the destructor does; bytes() is empty afterwards.
  void reset() noexcept;

 private:
  std::span<std::byte> bytes_;
  std::shared_ptr<std::atomic<bool>> released_;
};

}  // namespace mpitrain
