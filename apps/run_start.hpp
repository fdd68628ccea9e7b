#pragma once
// The checks of a training run before it touches anything (DESIGN.md sections 5 and 6),
// made once on rank 0, whose verdict every rank follows: a config error makes every rank
// exit 2 with the message printed once, never an MPI_Abort banner from every rank.
//
// start_run, in order:
//   1. project.dir is created if needed and must be writable (as must its checkpoints/, if
//      present): otherwise a ConfigError naming the folder and the system's reason;
//   2. the run lock (run_lock.hpp) is taken; held by another live run, a ConfigError names
//      the holder (pid, host, since). Nothing in the folder is touched before this, and the
//      checkpoint clean-up at start (checkpoint_manager.hpp) runs only after it, so it never
//      removes an in-progress save of a live run;
//   3. project.resume: PATH must name a committed checkpoint folder (one with MANIFEST.json,
//      not a save's temporary folder): otherwise a ConfigError naming it, before the
//      clean-up could remove such a folder as abandoned. The user's folder is left as it is.

#include <functional>
#include <optional>

#include "mpitrain/collectives/communicator.hpp"
#include "run_lock.hpp"
#include "train_config.hpp"

namespace mpitrain::app {

// What a run holds from its start to its end: rank 0's lock on project.dir (none elsewhere).
struct RunStart {
  std::optional<RunLock> lock;
};

// Returns the run's hold on project.dir after the checks above. Collective. Throws
// ConfigError on every rank (rank 0's message is the one printed).
RunStart start_run(const TrainConfig& config, const Communicator& comm);

// Runs `check` on rank 0 alone, then gives every rank its verdict (one broadcast): when it
// threw, rank 0 throws a ConfigError again as it was, or an AgreedError with the message of
// any other exception, and every other rank throws the same kind with a placeholder message
// (not printed). Collective.
void agree_on_rank0(const Communicator& comm, const std::function<void()>& check);

}  // namespace mpitrain::app
