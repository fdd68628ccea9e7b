#pragma once
// CheckpointManager: saves and loads checkpoints of a project folder with the commit
// protocol of DESIGN.md section 5, so that a crash, a full disk or a failing rank never
// leaves a half-written checkpoint where a committed one is expected.
//
// save (collective):
//   1. rank 0 picks the number N and a random id, broadcasts them, creates
//      checkpoints/checkpoint_<N>.tmp-<id>/;                                  agree
//   2. rank 0 writes state.h5, every rank r writes rank_<r>.h5, each fsynced;  agree
//   3. rank 0 hashes the files (XXH3-128; its own two from the bytes it wrote, the other
//      ranks' by reading them), writes MANIFEST.json and fsyncs it, fsyncs the folder,
//      renames it to checkpoint_<N>;                                           agree
//      then fsyncs checkpoints/ (a failure there is a warning: the checkpoint is committed);
//      barrier
//   4. rank 0 deletes the oldest committed checkpoints beyond total_limit (manifest first,
//      so an interrupted deletion leaves an uncommitted folder, never a broken committed one).
//   "agree" is an allgather of every rank's outcome: a failure anywhere throws the same
//   CheckpointError on every rank, after rank 0 removed the temporary folder.
//   Cost: building each HDF5 file in memory (h5_file.hpp), writing and fsyncing it, and rank 0
//   reading the other ranks' files once for the hash.
// load (collective): rank 0 verifies sizes and hashes of every file against the manifest
//   before any HDF5 call touches them; agree; then every rank reads state.h5 and its own
//   rank file into new objects; agree. Nothing live is modified.
//
// Numbering: the next automatic checkpoint is ProjectConfiguration::iteration if given,
// otherwise the highest committed number + 1 (0 for none); after loading checkpoint_<k> of
// this project it is k + 1 (Accelerate issues #1601, #3306). Saving never overwrites: if
// checkpoint_<N> exists, save throws (set iteration, or remove the newer checkpoints).
//
// At construction, rank 0 removes abandoned folders of checkpoints/: every temporary folder
// of a save ("<name>.tmp-<16 hex digits>", checkpoint_layout.hpp: automatic and explicit
// folders alike) and "checkpoint_<N>" without MANIFEST.json, then all ranks meet in a
// barrier. A save to an explicit folder outside checkpoints/ that is interrupted leaves its
// temporary folder there. Two jobs must not share one project folder.
//
// The collective calls use the Communicator passed in directly: call them when no other
// collective of that communicator is in flight (e.g. the engine's communication stream is
// drained), on every rank in the same order. Memory: writing builds each file in memory;
// the manager keeps that buffer (the size of state.h5) between saves, its pages released
// lazily (H5ImageBuffer).

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_state.hpp"
#include "mpitrain/checkpoint/checkpointable.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/manifest.hpp"
#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain::checkpoint {

struct ProjectConfiguration {
  // Checkpoints go to <project_dir>/checkpoints/. A relative path is resolved against the
  // current directory once, when the manager is constructed.
  std::filesystem::path project_dir = "runs/default";
  bool automatic_checkpoint_naming = true;
  // Keep at most this many automatic checkpoints (the newest by number); none = keep all.
  std::optional<std::size_t> total_limit;
  // Number of the next automatic checkpoint; none = after the highest existing one.
  std::optional<std::int64_t> iteration;
  // Dataset tuning for the HDF5 files.
  DatasetOptions dataset;
};

struct CheckpointInfo {
  std::int64_t number = 0;
  std::filesystem::path dir;
};

struct SaveResult {
  std::filesystem::path dir;               // the committed folder
  std::int64_t number = -1;                // N of checkpoint_<N>; -1 for an explicit folder
  std::vector<std::filesystem::path> removed;  // deleted by total_limit
  std::vector<std::string> warnings;       // after the commit: failed deletions or parent fsync
};

// The result of a load: new objects, plus access to the registered objects' groups.
class LoadedCheckpoint {
 public:
  std::filesystem::path dir;
  Manifest manifest;
  // replicated, config_yaml, per_rank (this rank's), step and epoch; `custom` stays empty.
  CheckpointState state;
  // True when this rank is at or beyond the world size the checkpoint was saved with: it has
  // no rank file, and per_rank is empty. The engine derives this rank's RNG streams
  // deterministically (from the seed and the rank) and warns.
  bool per_rank_missing = false;
  // Names of the objects saved under /custom, in name order.
  std::vector<std::string> custom_names;

  // Restores `object` from /custom/<name>; throws CheckpointError naming the known names
  // when there is no such object. Call after the engine applied the rest of the state.
  void restore(std::string_view name, Checkpointable& object) const;
  // Returns the groups of rank_<rank>.h5 (verified with the others by load()); for state
  // another rank saved: the optimizer pieces of every rank (ZeRO stage 1) when resharding.
  // Throws CheckpointError for a rank at or beyond the saved world size.
  std::map<std::string, StateGroup> rank_file(int rank) const;
  // Returns /custom/<name> read as a StateGroup.
  StateGroup custom_state(std::string_view name) const;

 private:
  friend class CheckpointManager;
  // state.h5, kept open read-only for the custom groups (already verified).
  std::shared_ptr<const H5File> state_file_;
};

// Returns the committed checkpoints (folders "checkpoint_<N>" holding MANIFEST.json) of
// `checkpoints_dir` in increasing numeric order: checkpoint_10 comes after checkpoint_9.
// Returns an empty list when the folder does not exist. Needs no MPI.
std::vector<CheckpointInfo> list_checkpoints(const std::filesystem::path& checkpoints_dir);
// Removes the abandoned folders of `checkpoints_dir` (see above); returns them.
std::vector<std::filesystem::path> remove_abandoned_checkpoints(
    const std::filesystem::path& checkpoints_dir);

class CheckpointManager {
 public:
  // Collective: resolves the project folder, cleans up (rank 0, then barrier) and agrees on
  // the next number. Throws std::invalid_argument for total_limit 0 or a negative iteration.
  CheckpointManager(ProjectConfiguration config, const Communicator& comm);

  const ProjectConfiguration& config() const noexcept { return config_; }
  // Returns <project_dir>/checkpoints (absolute).
  std::filesystem::path checkpoints_dir() const;
  // Returns the number the next automatic save will use.
  std::int64_t next_iteration() const noexcept { return next_; }
  // Makes the next automatic save checkpoint_<number>: after loading an older checkpoint
  // past a newer one that failed verification (kept, not overwritten), say. Local: call it
  // on every rank with the same number. Throws std::invalid_argument for a negative number.
  void set_next_iteration(std::int64_t number);
  // Returns the folders removed as abandoned at construction (rank 0; empty elsewhere).
  const std::vector<std::filesystem::path>& removed_at_start() const noexcept {
    return removed_at_start_;
  }

  // Collective: saves to checkpoints/checkpoint_<next_iteration()> and applies total_limit.
  // Throws std::logic_error when automatic_checkpoint_naming is off.
  SaveResult save(const CheckpointState& state, const Communicator& comm);
  // Collective: saves to `dir` (relative to the current directory; must not exist) with the
  // same protocol; numbering and total_limit are untouched.
  SaveResult save(const CheckpointState& state, const Communicator& comm,
                  const std::filesystem::path& dir);

  // Returns the committed checkpoints in numeric order (local directory listing).
  std::vector<CheckpointInfo> list() const;
  // Returns the highest-numbered committed checkpoint, if any.
  std::optional<std::filesystem::path> latest() const;
  // Returns the committed checkpoints numbered next_iteration() or more (local listing): the
  // next automatic save would fail on them, since saving never overwrites (after loading an
  // older checkpoint, say).
  std::vector<CheckpointInfo> in_the_way() const;
  // Returns the manifest of `dir` after checking every file's size and XXH3-128 against it
  // (verify_checkpoint; local, no HDF5). Throws CheckpointError naming the damaged file.
  Manifest verify(const std::filesystem::path& dir) const;

  // Collective: verifies and reads checkpoint folder `dir` (relative to the current
  // directory). All-or-nothing: throws on every rank if anything is wrong anywhere.
  LoadedCheckpoint load(const std::filesystem::path& dir, const Communicator& comm);
  // Collective: loads latest(); throws CheckpointError when there is none.
  LoadedCheckpoint load_latest(const Communicator& comm);

 private:
  SaveResult commit(const CheckpointState& state, const Communicator& comm,
                    const std::filesystem::path& target, std::int64_t number, std::uint64_t id);
  std::vector<std::filesystem::path> apply_total_limit(std::int64_t keep_number,
                                                       std::vector<std::string>& warnings) const;
  // Gives every rank rank 0's list of removed folders and warnings.
  static void share_report(const Communicator& comm, SaveResult& result);

  ProjectConfiguration config_;
  // Holds the file image while writing; kept between saves (h5_file.hpp, H5ImageBuffer).
  std::unique_ptr<H5ImageBuffer> image_buffer_ = std::make_unique<H5ImageBuffer>();
  std::int64_t next_ = 0;
  std::vector<std::filesystem::path> removed_at_start_;
};

}  // namespace mpitrain::checkpoint
