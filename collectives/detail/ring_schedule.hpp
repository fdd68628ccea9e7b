#pragma once
// The ring's layout and messages, shared by the ring allreduces (internal to collectives/:
// ring_allreduce.cpp moves buffers of one type, wire_ring_allreduce.cpp moves fp32 data as
// 16-bit values).
//
// A buffer of `count` elements is cut into one chunk per rank (Chunks); rank r sends to
// r + 1 and receives from r - 1 (Ring). Messages are MPI_BYTE pieces with one tag, so two
// messages between the same pair of ranks match in the order they were posted.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/detail/bounded_wait.hpp"

namespace mpitrain::detail {

// Segment of a chunk received and combined at a time, in bytes as sent: small enough to be
// combined while it is still in the L2 cache, large enough to amortise a message's overhead.
inline constexpr std::size_t kRingSegmentBytes = std::size_t{256} << 10;
// Segments of a chunk in flight at once while the rank combines (or converts) the one that
// arrived.
inline constexpr std::size_t kRingSlots = 3;

// The n chunks of a buffer of `count` elements: as equal as possible, the first count % n
// chunks one element longer. Chunks are empty when count < n.
struct Chunks {
  std::size_t count;
  std::size_t n;
  std::size_t begin(std::size_t c) const noexcept {
    return count / n * c + std::min(c, count % n);
  }
  std::size_t length(std::size_t c) const noexcept { return count / n + (c < count % n ? 1 : 0); }
};

class Ring {
 public:
  // `count` is the element count of the whole allreduce (for error messages).
  // `timeout` bounds each wait for messages (zero: none; see bounded_wait.hpp).
  Ring(MPI_Comm comm, int rank, int size, std::size_t count,
       std::chrono::nanoseconds timeout = {})
      : comm_(comm), rank_(rank), size_(size), count_(count), timeout_(timeout) {}

  int right() const noexcept { return (rank_ + 1) % size_; }
  int left() const noexcept { return (rank_ + size_ - 1) % size_; }
  // Returns the chunk index rank + offset, modulo the ring size.
  std::size_t chunk_of(int offset) const noexcept {
    return static_cast<std::size_t>(((rank_ + offset) % size_ + size_) % size_);
  }

  // Posts one send of bytes [data, data + bytes) to the right neighbour (bytes <= INT_MAX).
  void post_send(const void* data, std::size_t bytes, std::vector<MPI_Request>& reqs) const {
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, right(), kTag, comm_, &req),
          "MPI_Isend");
    reqs.push_back(req);
  }
  // Posts sends of bytes [data, data + bytes) to the right neighbour in messages of at most
  // `piece` bytes.
  void post_sends(const std::byte* data, std::size_t bytes, std::size_t piece,
                  std::vector<MPI_Request>& reqs) const {
    for (std::size_t off = 0; off < bytes; off += piece) {
      post_send(data + off, std::min(piece, bytes - off), reqs);
    }
  }
  // Posts a receive of `bytes` bytes (<= INT_MAX) from the left neighbour into data.
  void post_recv(void* data, std::size_t bytes, MPI_Request* req) const {
    check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, left(), kTag, comm_, req),
          "MPI_Irecv");
  }
  void wait(MPI_Request* req) const { check(wait_requests(req, 1, timeout_), "MPI_Wait"); }
  void wait_all(std::vector<MPI_Request>& reqs) const {
    if (reqs.empty()) return;
    check(wait_requests(reqs.data(), static_cast<int>(reqs.size()), timeout_), "MPI_Waitall");
    reqs.clear();
  }
  // Throws MpiError naming the call, the rank and the count unless rc is MPI_SUCCESS.
  void check(int rc, const char* call) const {
    if (rc != MPI_SUCCESS) {
      throw MpiError(std::string(call) + " (ring allreduce)", rank_, count_, rc, {});
    }
  }

 private:
  static constexpr int kTag = 0x5249;  // "RI"
  MPI_Comm comm_;
  int rank_;
  int size_;
  std::size_t count_;
  std::chrono::nanoseconds timeout_;
};

}  // namespace mpitrain::detail
