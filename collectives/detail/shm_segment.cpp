// ShmSegment (see shm_segment.hpp): windows, control slots, waiting, arena.
#include "mpitrain/collectives/detail/shm_segment.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "mpitrain/collectives/detail/shared_futex.hpp"
#include "mpitrain/collectives/mpi_error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mpitrain::detail {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kCacheLine = 64;
// Byte offsets inside a control slot: the sequence number and the input offset on separate
// cache lines, so a peer polling one does not contend with the owner writing the other.
constexpr std::size_t kSequenceAt = 0;
// A note on the result of the stage the sequence number publishes, on the same cache line:
// a peer that sees the number gets the note with it.
constexpr std::size_t kResultFlagsAt = 8;
constexpr std::size_t kInputOffsetAt = kCacheLine;  // two slots
constexpr std::size_t kProgressAt = 2 * kCacheLine;
constexpr std::size_t kReportedAt = 3 * kCacheLine;
constexpr std::size_t kCheckIndexAt = 4 * kCacheLine;
constexpr std::size_t kCheckSlotsAt = 5 * kCacheLine;  // two slots of three words
// The number of peers asleep on this rank's sequence number, and on its check index
// (shared_futex.hpp): written by the sleepers, read by the owner when it publishes.
constexpr std::size_t kSleepersAt = 6 * kCacheLine;
constexpr std::size_t kCheckSleepersAt = 7 * kCacheLine;
constexpr std::size_t kProbeAt = 8 * kCacheLine;
// A waiter's three phases. Polls with a pause instruction first, keeping its core: a peer
// running on another core arrives within microseconds (between the pieces of one
// collective), and a waiter that gave its core away this early lost it to any other process
// for a whole time slice (measured on a loaded 2-core VM: 256 pauses, 6 us, then yielding,
// made shm 0.23-0.9x MPI at 1-8 MiB while compilers ran beside it).
constexpr std::chrono::microseconds kSpinFor{20};
// Pauses between two reads of the clock while spinning (a pause takes ~25 ns here, a clock
// read ~20 ns).
constexpr int kPausesPerClockRead = 32;
// Then yields its core, re-reading the flag after each yield, until it has waited this long:
// long enough to cover a peer that was briefly descheduled, short enough that a waiter
// sharing its core with computation (the engine's communication thread during backward)
// gives most of that core back.
constexpr std::chrono::microseconds kYieldFor{50};
// Then sleeps on the peer's sequence number until the peer publishes (futex: no CPU at all),
// at most this long per sleep, so that the deadline is checked.
constexpr std::chrono::milliseconds kMaxSleep{20};

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void cpu_relax() noexcept {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

bool mpi_finalized() noexcept {
  int finalized = 0;
  return MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0;
}

}  // namespace

ShmTimeout::ShmTimeout(std::string_view collective, int rank, std::uint64_t sequence,
                       std::vector<int> missing, std::chrono::nanoseconds waited)
    : std::runtime_error(fmt::format(
          "{} timed out on node rank {} after {:.3f} s waiting for sequence number {}: "
          "node rank(s) {} did not arrive",
          collective, rank, std::chrono::duration<double>(waited).count(), sequence,
          fmt::join(missing, ", "))),
      missing_(std::move(missing)),
      waited_(waited) {}

ShmSegment::ShmSegment(MPI_Comm node_comm, ShmOptions options)
    : workspace_bytes_(round_up(std::max<std::size_t>(options.workspace_bytes, 1), kPage)),
      symmetric_bytes_(options.symmetric_bytes),
      symmetric_max_ranks_(options.symmetric_max_ranks),
      timeout_(options.timeout) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  check_mpi(MPI_Comm_dup(node_comm, &comm_), "MPI_Comm_dup (shared-memory segment)", world_rank,
            0);
  try {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", world_rank, 0);
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", world_rank, 0);
    main_ = allocate_window(kPage + 4 * workspace_bytes_, "shared-memory segment");
    sequence_slot(rank_).store(0, std::memory_order_relaxed);
    control_word(rank_, kResultFlagsAt).store(0, std::memory_order_relaxed);
    control_word(rank_, kProgressAt).store(0, std::memory_order_relaxed);
    control_word(rank_, kReportedAt).store(0, std::memory_order_relaxed);
    control_word(rank_, kCheckIndexAt).store(0, std::memory_order_relaxed);
    control_word(rank_, kSleepersAt).store(0, std::memory_order_relaxed);
    control_word(rank_, kCheckSleepersAt).store(0, std::memory_order_relaxed);
    control_word(rank_, kProbeAt).store(0, std::memory_order_relaxed);
    // Every slot is initialised before any rank can read it.
    check_mpi(MPI_Barrier(comm_), "MPI_Barrier (shared-memory segment)", rank_, 0);
  } catch (...) {
    if (main_.win != MPI_WIN_NULL) MPI_Win_free(&main_.win);
    MPI_Comm_free(&comm_);
    throw;
  }
}

ShmSegment::~ShmSegment() {
  if (mpi_finalized()) return;
  for (Region& region : arena_) {
    if (region.win != MPI_WIN_NULL) MPI_Win_free(&region.win);  // a failed free_released
  }
  if (main_.win != MPI_WIN_NULL) MPI_Win_free(&main_.win);
  MPI_Comm_free(&comm_);
}

// Returns a window of bytes_per_rank on every rank of the node, with every rank's base address
// rounded up to a cache line (Open MPI aligns each rank's part to a page at 2 ranks and more,
// but a window of one rank may start 16 bytes into one; one spare cache line is allocated).
ShmSegment::Region ShmSegment::allocate_window(std::size_t bytes_per_rank, const char* what) {
  Region region;
  region.bytes = bytes_per_rank;
  bytes_per_rank += kCacheLine;
  MPI_Info info = MPI_INFO_NULL;
  check_mpi(MPI_Info_create(&info), "MPI_Info_create", rank_, bytes_per_rank);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* base = nullptr;
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes_per_rank), 1, info, comm_,
                                         &base, &region.win);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    throw MpiError("MPI_Win_allocate_shared", rank_, bytes_per_rank, rc,
                   fmt::format("{} of {} bytes per rank", what, bytes_per_rank));
  }
  region.bases.resize(static_cast<std::size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) {
    MPI_Aint peer_bytes = 0;
    int disp_unit = 0;
    void* peer_base = nullptr;
    const int query =
        MPI_Win_shared_query(region.win, peer, &peer_bytes, &disp_unit, &peer_base);
    if (query != MPI_SUCCESS) {
      MPI_Win_free(&region.win);
      throw MpiError("MPI_Win_shared_query", rank_, bytes_per_rank, query,
                     fmt::format("{}, peer {}", what, peer));
    }
    const auto aligned = round_up(reinterpret_cast<std::uintptr_t>(peer_base), kCacheLine);
    region.bases[static_cast<std::size_t>(peer)] = reinterpret_cast<std::byte*>(aligned);
  }
  return region;
}

std::byte* ShmSegment::workspace_in(int peer, int buffer) const noexcept {
  return main_.bases[static_cast<std::size_t>(peer)] + kPage +
         static_cast<std::size_t>(buffer) * 2 * workspace_bytes_;
}

std::byte* ShmSegment::workspace_out(int peer, int buffer) const noexcept {
  return workspace_in(peer, buffer) + workspace_bytes_;
}

std::atomic_ref<std::uint64_t> ShmSegment::sequence_slot(int peer) const noexcept {
  return control_word(peer, kSequenceAt);
}

std::atomic_ref<std::uint64_t> ShmSegment::probe_word() const noexcept {
  return control_word(0, kProbeAt);
}

std::uint64_t* ShmSegment::control_address(int peer, std::size_t at) const noexcept {
  return reinterpret_cast<std::uint64_t*>(main_.bases[static_cast<std::size_t>(peer)] + at);
}

std::atomic_ref<std::uint64_t> ShmSegment::control_word(int peer, std::size_t at) const noexcept {
  return std::atomic_ref<std::uint64_t>(*control_address(peer, at));
}

void ShmSegment::publish_progress(std::uint64_t collective) noexcept {
  control_word(rank_, kProgressAt).store(collective, std::memory_order_release);
}

std::uint64_t ShmSegment::progress(int peer) const noexcept {
  return control_word(peer, kProgressAt).load(std::memory_order_acquire);
}

void ShmSegment::publish_check(std::uint64_t index,
                               const std::array<std::uint64_t, 3>& values) noexcept {
  const std::size_t slot = kCheckSlotsAt + (index & 1u) * 3 * sizeof(std::uint64_t);
  for (std::size_t i = 0; i < 3; ++i) {
    control_word(rank_, slot + i * sizeof(std::uint64_t)).store(values[i], std::memory_order_relaxed);
  }
  store_and_wake(kCheckIndexAt, kCheckSleepersAt, index);
}

bool ShmSegment::wait_check_index(int peer, std::uint64_t index,
                                  std::chrono::nanoseconds max_wait) {
  return await_word(peer, kCheckIndexAt, kCheckSleepersAt, index, max_wait);
}

std::uint64_t ShmSegment::check_index(int peer) const noexcept {
  return control_word(peer, kCheckIndexAt).load(std::memory_order_acquire);
}

std::array<std::uint64_t, 3> ShmSegment::check_values(int peer, std::uint64_t index) const noexcept {
  const std::size_t slot = kCheckSlotsAt + (index & 1u) * 3 * sizeof(std::uint64_t);
  std::array<std::uint64_t, 3> values{};
  for (std::size_t i = 0; i < 3; ++i) {
    values[i] = control_word(peer, slot + i * sizeof(std::uint64_t)).load(std::memory_order_relaxed);
  }
  return values;
}

void ShmSegment::set_result_flags(std::uint64_t flags) noexcept {
  // Relaxed: publish() orders it (a sequentially consistent store is a release).
  control_word(rank_, kResultFlagsAt).store(flags, std::memory_order_relaxed);
}

std::uint64_t ShmSegment::result_flags(int peer) const noexcept {
  // Relaxed: read after wait_all saw the peer's number (acquire).
  return control_word(peer, kResultFlagsAt).load(std::memory_order_relaxed);
}

void ShmSegment::mark_reported(std::uint64_t stage) noexcept {
  control_word(rank_, kReportedAt).store(stage, std::memory_order_release);
}

std::uint64_t ShmSegment::reported(int peer) const noexcept {
  return control_word(peer, kReportedAt).load(std::memory_order_acquire);
}

std::uint64_t* ShmSegment::input_slot(int peer) const noexcept {
  auto* slots = reinterpret_cast<std::uint64_t*>(main_.bases[static_cast<std::size_t>(peer)] +
                                                 kInputOffsetAt);
  return slots + (inputs_begun_ & 1u);
}

void ShmSegment::begin_input(std::uint64_t offset) noexcept {
  ++inputs_begun_;
  std::atomic_ref<std::uint64_t>(*input_slot(rank_)).store(offset, std::memory_order_relaxed);
}

std::uint64_t ShmSegment::input_offset(int peer) const noexcept {
  return std::atomic_ref<std::uint64_t>(*input_slot(peer)).load(std::memory_order_relaxed);
}

std::uint64_t ShmSegment::publish() {
  store_and_wake(kSequenceAt, kSleepersAt, ++sequence_);
  return sequence_;
}

void ShmSegment::store_and_wake(std::size_t at, std::size_t sleepers_at, std::uint64_t value) {
  // Sequentially consistent store and load: with a sleeper's increment and re-read (see
  // sleep_on), either the sleeper sees the new value or this rank sees the sleeper.
  control_word(rank_, at).store(value, std::memory_order_seq_cst);
  if (control_word(rank_, sleepers_at).load(std::memory_order_seq_cst) != 0) {
    futex_wake_all(control_address(rank_, at));
  }
}

void ShmSegment::require_usable(const char* collective) const {
  if (broken_) {
    throw std::logic_error(fmt::format(
        "{} on node rank {}: the shared-memory segment is unusable after an earlier timeout",
        collective, rank_));
  }
}

std::vector<int> ShmSegment::missing(std::uint64_t sequence) const {
  std::vector<int> late;
  for (int peer = 0; peer < size_; ++peer) {
    if (sequence_slot(peer).load(std::memory_order_acquire) < sequence) late.push_back(peer);
  }
  return late;
}

void ShmSegment::time_out(std::uint64_t sequence, const char* collective,
                          std::chrono::nanoseconds waited) {
  broken_ = true;
  throw ShmTimeout(collective, rank_, sequence, missing(sequence), waited);
}

void ShmSegment::wait_all(std::uint64_t sequence, const char* collective) {
  using Clock = std::chrono::steady_clock;
  const bool bounded = timeout_.count() > 0;
  const Clock::time_point start = bounded ? Clock::now() : Clock::time_point{};
  for (int peer = 0; peer < size_; ++peer) {
    // Bounded: what is left of the timeout (at least a nanosecond: zero means no limit).
    const auto left = bounded ? std::max<std::chrono::nanoseconds>(
                                    timeout_ - (Clock::now() - start), std::chrono::nanoseconds(1))
                              : std::chrono::nanoseconds(0);
    if (!await_word(peer, kSequenceAt, kSleepersAt, sequence, left)) {
      time_out(sequence, collective, Clock::now() - start);
    }
  }
}

bool ShmSegment::await_word(int peer, std::size_t at, std::size_t sleepers_at,
                            std::uint64_t target, std::chrono::nanoseconds max_wait) {
  using Clock = std::chrono::steady_clock;
  const std::atomic_ref<std::uint64_t> word = control_word(peer, at);
  const bool bounded = max_wait.count() > 0;
  Clock::time_point start{};  // read at the first miss: most waits end at the first load
  bool spinning = true;
  for (long polls = 0;; ++polls) {
    const std::uint64_t seen = word.load(std::memory_order_acquire);
    if (seen >= target) return true;
    if (polls == 0) start = Clock::now();
    if (spinning) {
      if (polls % kPausesPerClockRead != 0 || Clock::now() - start < kSpinFor) {
        cpu_relax();
        continue;
      }
      spinning = false;
    }
    const auto waited = Clock::now() - start;
    if (bounded && waited > max_wait) return false;
    if (waited < kYieldFor) {
      sched_yield();
      continue;
    }
    const auto left = bounded ? max_wait - waited : kMaxSleep;
    sleep_on(peer, at, sleepers_at, seen, std::min<std::chrono::nanoseconds>(left, kMaxSleep));
  }
}

void ShmSegment::sleep_on(int peer, std::size_t at, std::size_t sleepers_at, std::uint64_t seen,
                          std::chrono::nanoseconds max_sleep) {
  // Registered as a sleeper for exactly the sleep, also when futex_sleep throws: a count
  // left behind would cost the peer a wake-up system call at every later publish.
  struct Sleeper {
    std::atomic_ref<std::uint64_t> count;
    explicit Sleeper(std::atomic_ref<std::uint64_t> c) : count(c) {
      count.fetch_add(1, std::memory_order_seq_cst);
    }
    ~Sleeper() { count.fetch_sub(1, std::memory_order_seq_cst); }
    Sleeper(const Sleeper&) = delete;
    Sleeper& operator=(const Sleeper&) = delete;
  };
  const Sleeper sleeper(control_word(peer, sleepers_at));
  if (control_word(peer, at).load(std::memory_order_seq_cst) == seen) {
    futex_sleep(control_address(peer, at), seen, max_sleep);
  }
}

SharedBuffer ShmSegment::allocate(std::size_t bytes) {
  // After a timeout a peer may never join the collective frees, and a send left posted may
  // still read arena memory.
  require_usable("allocate_shared");
  free_released();
  if (bytes == 0) return {};
  const std::size_t rounded = round_up(bytes, kCacheLine);
  Region region = allocate_window(round_up(rounded, kPage), "shared-memory arena");
  region.offset = arena_end_;
  region.released = std::make_shared<std::atomic<bool>>(false);
  arena_end_ += region.bytes;
  std::byte* mine = region.bases[static_cast<std::size_t>(rank_)];
  std::memset(mine, 0, region.bytes);
  std::shared_ptr<std::atomic<bool>> released = region.released;
  arena_.push_back(std::move(region));
  return SharedBuffer({mine, rounded}, std::move(released));
}

// Every rank holds the same windows in the same order (allocate() is collective), so a bitwise
// AND of the per-rank "released" marks names, alike on every rank, the windows no rank still
// uses; they are freed in arena order, which MPI_Win_free (collective) needs. Arena offsets are
// never reused: an offset read before a free cannot name a later buffer.
void ShmSegment::free_released() {
  if (arena_.empty()) return;
  std::vector<unsigned char> everywhere(arena_.size());
  for (std::size_t i = 0; i < arena_.size(); ++i) {
    everywhere[i] = arena_[i].released->load(std::memory_order_acquire) ? 1 : 0;
  }
  // One window per allocation: far fewer than 2^31 of them.
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, everywhere.data(), static_cast<int>(everywhere.size()),
                          MPI_UNSIGNED_CHAR, MPI_BAND, comm_),
            "MPI_Allreduce (released shared-memory arena windows)", rank_, everywhere.size());
  std::vector<Region> kept;
  for (std::size_t i = 0; i < arena_.size(); ++i) {
    if (everywhere[i] == 0) continue;
    const int rc = MPI_Win_free(&arena_[i].win);
    if (rc != MPI_SUCCESS) {
      // Some windows are freed (their handles now MPI_WIN_NULL), others not, perhaps not
      // alike on every rank: no later collective may run on the segment.
      broken_ = true;
      check_mpi(rc, "MPI_Win_free (shared-memory arena)", rank_, arena_[i].bytes);
    }
  }
  // Moved only once every free succeeded: a throw above leaves arena_ whole for the destructor.
  for (std::size_t i = 0; i < arena_.size(); ++i) {
    if (everywhere[i] == 0) kept.push_back(std::move(arena_[i]));
  }
  arena_ = std::move(kept);
}

std::size_t ShmSegment::arena_bytes() const noexcept {
  std::size_t total = 0;
  for (const Region& region : arena_) total += region.bytes;
  return total;
}

bool ShmSegment::owns(const void* p) const noexcept {
  return arena_offset(p, 1).has_value();
}

std::optional<std::uint64_t> ShmSegment::arena_offset(const void* p,
                                                      std::size_t bytes) const noexcept {
  const auto* b = static_cast<const std::byte*>(p);
  for (const Region& region : arena_) {
    const std::byte* mine = region.bases[static_cast<std::size_t>(rank_)];
    // Compare as integers: p need not point into this region at all.
    const auto at = reinterpret_cast<std::uintptr_t>(b);
    const auto lo = reinterpret_cast<std::uintptr_t>(mine);
    if (at >= lo && at - lo <= region.bytes && bytes <= region.bytes - (at - lo)) {
      return region.offset + (at - lo);
    }
  }
  return std::nullopt;
}

std::byte* ShmSegment::peer_address(int peer, std::uint64_t offset) const noexcept {
  for (const Region& region : arena_) {
    if (offset >= region.offset && offset < region.offset + region.bytes) {
      return region.bases[static_cast<std::size_t>(peer)] + (offset - region.offset);
    }
  }
  return nullptr;
}

}  // namespace mpitrain::detail
