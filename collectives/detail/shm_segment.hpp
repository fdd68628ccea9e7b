#pragma once
// ShmSegment: the shared memory the ranks of one node use for the shared-memory collectives
// (internal to collectives/; shm_collectives.hpp runs the algorithms over it).
//
// Backing: MPI_Win_allocate_shared on a duplicate of the node communicator, with
// alloc_shared_noncontig so that each rank's part starts on a page; MPI_Win_shared_query gives
// the peers' base addresses. Open MPI 4.1 (osc/sm) creates the window's file in /dev/shm and
// unlinks it once every rank has mapped it, inside MPI_Win_allocate_shared: while collectives
// run no name exists, and the kernel frees the memory when the last process mapping it ends,
// SIGKILL and MPI_Abort included (tests/collectives/shm_kill_test.cmake checks it).
//
// Layout of each rank's part of the main window (all offsets page-aligned):
//   control slot (one page): sequence number (std::atomic_ref<std::uint64_t>, written only by
//       its owner with release, read by peers with acquire) with the owner's note on the
//       result of the stage it published (set_result_flags) beside it; on their own cache
//       line, two alternating arena offsets of the owner's input (kNoOffset when it is not in the
//       arena; see begin_input); then, a cache line each, the number of the Communicator
//       collective the owner last entered and its "reported a timeout" mark (deadline
//       reports, collective_watch.hpp: peers read them without the owner's help), the
//       fingerprint check's index and values, and the numbers of peers asleep on the
//       owner's sequence number (wait_all) and on its check index (wait_check_index), each
//       on its own cache line (shared_futex.hpp); the probe word (core_latency.hpp), on its
//       own line;
//   workspace 0, workspace 1: each `workspace_bytes` of input followed by `workspace_bytes` of
//       output; a collective alternates between them piece by piece (double buffering), so a
//       rank may run one piece ahead of its slowest peer without overwriting what it reads.
//
// Arena: allocate(bytes) adds one window per call (collective over the node, same sizes in the
// same order on every rank); an arena offset names the same byte on every rank, and
// peer_address(peer, offset) finds it in a peer's memory. Buffers there are read by peers in
// place (zero copy) by shm_allreduce. A SharedBuffer's end marks its window released (no MPI
// call); each allocate() first frees, by one MPI_Allreduce of the released marks, the windows
// every rank has released, so a program that allocates again after releasing (an engine
// prepared again) keeps one set of buffers mapped, not one per allocation.
//
// Construction, allocate() and destruction are collective over the node communicator (they
// create and free MPI windows). After a timeout the segment is broken: its sequence numbers
// no longer agree between ranks, and every later collective on it throws.

#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/collectives/shared_buffer.hpp"

namespace mpitrain::detail {

// Raised when a wait for peers passes the segment's deadline; names the collective, this rank,
// the sequence number waited for and the ranks (of the node communicator) that did not arrive.
class ShmTimeout : public std::runtime_error {
 public:
  ShmTimeout(std::string_view collective, int rank, std::uint64_t sequence,
             std::vector<int> missing, std::chrono::nanoseconds waited);
  const std::vector<int>& missing_ranks() const noexcept { return missing_; }
  std::chrono::nanoseconds waited() const noexcept { return waited_; }

 private:
  std::vector<int> missing_;
  std::chrono::nanoseconds waited_;
};

struct ShmOptions {
  // Bytes of input per workspace (there are two per rank, each with as many bytes of
  // output); bounds the piece a collective handles per synchronisation. Rounded up to 4 KiB.
  // 256 KiB: a rank's 2 x (in + out) = 1 MiB stays in its 2 MiB L2 on this VM; 1 MiB was no
  // faster in noisy measurements at 2 ranks (1-256 MiB f32).
  std::size_t workspace_bytes = std::size_t{256} << 10;
  // shm_allreduce combines a piece on every rank (symmetric: one synchronisation; per rank
  // reads n pieces, writes 1, straight into recv) instead of slice by slice (distributed: two
  // synchronisations; reads 2 pieces, writes 1 + 1/n) when size() <= symmetric_max_ranks
  // (at 2 ranks symmetric moves fewer bytes) or size() * piece bytes <= symmetric_bytes.
  // Inputs in the arena (zero copy) always go slice by slice. Slice by slice at 2 ranks was
  // measured again on 2026-11-28 (ordinary buffers, two interleaved runs per L3 state): it
  // took 0.83-0.94x symmetric's time for f32 from 256 KiB to 8 MiB when the two cores share
  // an L3 cache, but 1.20-1.47x for f32 and up to 1.30x for bf16 when they do not; the cores
  // move between the two states within seconds, so 2 ranks stay symmetric.
  int symmetric_max_ranks = 2;
  std::size_t symmetric_bytes = std::size_t{256} << 10;
  // How long one wait for peers may last; zero waits for ever.
  std::chrono::nanoseconds timeout{0};
};

class ShmSegment {
 public:
  // An arena offset meaning "not in the arena".
  static constexpr std::uint64_t kNoOffset = ~std::uint64_t{0};

  // Collective over `node_comm`, whose ranks must share memory (MPI_Comm_split_type with
  // MPI_COMM_TYPE_SHARED). Duplicates it; the caller keeps ownership of `node_comm`. Throws
  // MpiError naming the failed call, the rank and the bytes.
  explicit ShmSegment(MPI_Comm node_comm, ShmOptions options = {});
  // Collective: frees the windows and the communicator, unless MPI is already finalised.
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
  // Returns true when shm_allreduce runs a piece of `piece_bytes` symmetrically (ShmOptions).
  bool symmetric(std::size_t piece_bytes) const noexcept {
    return size_ <= symmetric_max_ranks_ ||
           static_cast<std::size_t>(size_) * piece_bytes <= symmetric_bytes_;
  }
  std::chrono::nanoseconds timeout() const noexcept { return timeout_; }
  // Every rank should set the same timeout (each rank's waits use its own).
  void set_timeout(std::chrono::nanoseconds timeout) noexcept { timeout_ = timeout; }

  // Returns rank 0's probe word (a cache line of its own in rank 0's control page), which
  // measure_core_latency passes between ranks 0 and 1; only that function uses it.
  std::atomic_ref<std::uint64_t> probe_word() const noexcept;

  // Returns the input area (workspace_bytes) of `peer`'s workspace `buffer` (0 or 1).
  std::byte* workspace_in(int peer, int buffer) const noexcept;
  // Returns the output area (workspace_bytes) of `peer`'s workspace `buffer` (0 or 1).
  std::byte* workspace_out(int peer, int buffer) const noexcept;

  // Returns the workspace (0 or 1) for the next piece, alternating across pieces and calls
  // (the same on every rank). Reuse is safe: a rank writes workspace b for piece P only after
  // waiting, in piece P-1, for every peer to publish a stage of P-1, which a peer does only
  // after it has finished reading piece P-2 (the last user of b).
  int next_buffer() noexcept { return static_cast<int>(pieces_++ & 1u); }

  // ---- synchronisation ------------------------------------------------------------------
  // Returns the sequence number the next publish() will store: one more than the last. Every
  // rank publishes the same numbers in the same order (one per collective stage).
  std::uint64_t next_sequence() const noexcept { return sequence_ + 1; }
  // Stores the next sequence number into this rank's slot (sequentially consistent, so also a
  // release): everything this rank wrote to shared memory before is visible to a peer that
  // sees the number. Wakes the peers asleep on this rank's number, if any (one system call).
  std::uint64_t publish();
  // Returns when every rank has published `sequence` (acquire). Spins for 20 us (keeping
  // the core: a running peer arrives within microseconds), then yields the core until 50 us
  // have passed, then sleeps on the late peer's number (futex) until
  // it publishes: on a node with no spare core a waiter that kept spinning or yielding would
  // take the core of the rank it waits for (or of its own rank's computation, for the
  // engine's communication thread). Throws ShmTimeout, and breaks the segment, past the
  // timeout.
  void wait_all(std::uint64_t sequence, const char* collective);
  // Throws std::logic_error when an earlier wait timed out (the ranks no longer agree).
  void require_usable(const char* collective) const;

  // Starts a collective whose inputs peers may read in the arena: stores the arena offset of
  // this rank's input (kNoOffset: not in the arena) for the next publish() to make visible.
  // Every rank calls it for the same collectives. input_offset(peer) returns peer's for the
  // current one; read it right after the collective's first wait_all. Two slots alternate: a
  // peer may start the next such collective (writing the other slot) once it has seen this
  // rank's first stage, but not the one after (which rewrites this slot) before this rank
  // publishes a stage of the next one, after its read.
  void begin_input(std::uint64_t offset) noexcept;
  std::uint64_t input_offset(int peer) const noexcept;

  // Stores `flags`, this rank's note on the result of the stage it publishes next (for
  // shm_allreduce: 1 when a value it combined is not finite), for that publish() to make
  // visible; result_flags(peer) reads a peer's once wait_all saw that stage. Call it after the
  // collective's first wait_all only: then every peer has read the previous note (it passed
  // the previous collective's last stage before publishing this one's first).
  void set_result_flags(std::uint64_t flags) noexcept;
  std::uint64_t result_flags(int peer) const noexcept;

  // ---- progress of Communicator collectives (deadline reports) ------------------------
  // Stores `collective`, the number of the collective this rank enters, where peers read it
  // without this rank's help (a stopped rank's last number stays readable). One store.
  void publish_progress(std::uint64_t collective) noexcept;
  // Returns the number `peer` last published with publish_progress (0: none yet).
  std::uint64_t progress(int peer) const noexcept;
  // Fingerprint checks through shared memory: publish_check stores this rank's `values` of
  // check number `index` (two slots alternate by its parity), then the index (release);
  // check_index(peer) reads a peer's last index (acquire), check_values(peer, index) the
  // values it published for `index` (valid while the peer's index is index or index + 1).
  void publish_check(std::uint64_t index, const std::array<std::uint64_t, 3>& values) noexcept;
  std::uint64_t check_index(int peer) const noexcept;
  // Returns true once `peer`'s check index is at least `index`, false when `max_wait` passed
  // first (zero: no limit). Waits as wait_all does (spin, yield, then sleep until publish_check
  // wakes it).
  bool wait_check_index(int peer, std::uint64_t index, std::chrono::nanoseconds max_wait);
  std::array<std::uint64_t, 3> check_values(int peer, std::uint64_t index) const noexcept;
  // Stores how far this rank got in reporting a timeout (a stage number > 0; 0: not timed
  // out); reported(peer) reads a peer's.
  void mark_reported(std::uint64_t stage) noexcept;
  std::uint64_t reported(int peer) const noexcept;

  // ---- arena ----------------------------------------------------------------------------
  // Returns a handle to `bytes` (rounded up to 64) of shared memory at the same arena offset
  // on every rank, 64-byte aligned, zero-filled; empty for 0 bytes. Collective: every rank
  // calls it with the same size, in the same order. First frees the windows every rank has
  // released (one MPI_Allreduce when the arena is not empty). The memory lives until every
  // rank has released its handle and allocate() runs again, or the segment is destroyed.
  [[nodiscard]] SharedBuffer allocate(std::size_t bytes);
  // Returns the bytes of this rank's part of the arena now mapped (each allocation rounded up
  // to whole pages; released windows not yet freed included).
  std::size_t arena_bytes() const noexcept;
  // Returns true when p lies in memory allocate() returned to this rank.
  bool owns(const void* p) const noexcept;
  // Returns the arena offset of p when [p, p + bytes) lies in one allocation of this rank.
  std::optional<std::uint64_t> arena_offset(const void* p, std::size_t bytes) const noexcept;
  // Returns the address of arena offset `offset` in `peer`'s memory (nullptr outside).
  std::byte* peer_address(int peer, std::uint64_t offset) const noexcept;

 private:
  struct Region {
    MPI_Win win = MPI_WIN_NULL;
    std::vector<std::byte*> bases;  // per rank
    std::uint64_t offset = 0;       // arena offset of the region's first byte
    std::size_t bytes = 0;
    std::shared_ptr<std::atomic<bool>> released;  // set by the SharedBuffer's end (arena)
  };
  Region allocate_window(std::size_t bytes_per_rank, const char* what);
  // Frees the arena windows every rank of the node has released (collective).
  void free_released();
  std::atomic_ref<std::uint64_t> sequence_slot(int peer) const noexcept;
  // Returns the address of `peer`'s 64-bit word at byte `at` of its control slot.
  std::uint64_t* control_address(int peer, std::size_t at) const noexcept;
  // Returns `peer`'s 64-bit word at byte `at` of its control slot.
  std::atomic_ref<std::uint64_t> control_word(int peer, std::size_t at) const noexcept;
  // Stores `value` into this rank's control word at `at` and wakes the peers asleep on it (their
  // count is at `sleepers_at`).
  void store_and_wake(std::size_t at, std::size_t sleepers_at, std::uint64_t value);
  // Returns true once `peer`'s control word at `at` is at least `target`; false when `max_wait`
  // passed first (zero: no limit). Spins for 20 us, yields until 50 us, then sleeps on it.
  bool await_word(int peer, std::size_t at, std::size_t sleepers_at, std::uint64_t target,
                  std::chrono::nanoseconds max_wait);
  // Sleeps until `peer`'s control word at `at` is no longer `seen`, for at most `max_sleep`,
  // counted at `sleepers_at` as a sleeper so that the peer's store_and_wake() wakes it.
  void sleep_on(int peer, std::size_t at, std::size_t sleepers_at, std::uint64_t seen,
                std::chrono::nanoseconds max_sleep);
  std::uint64_t* input_slot(int peer) const noexcept;
  std::vector<int> missing(std::uint64_t sequence) const;
  [[noreturn]] void time_out(std::uint64_t sequence, const char* collective,
                             std::chrono::nanoseconds waited);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::size_t workspace_bytes_ = 0;
  std::size_t symmetric_bytes_ = 0;
  int symmetric_max_ranks_ = 0;
  std::chrono::nanoseconds timeout_{0};
  Region main_;
  std::vector<Region> arena_;
  std::uint64_t arena_end_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t pieces_ = 0;
  std::uint64_t inputs_begun_ = 0;
  bool broken_ = false;
};

}  // namespace mpitrain::detail
