#pragma once
// TrainingRun: what `trainer --config run.yaml` does on every rank. It builds the data sets,
// the model (with its loss and evaluation metric), the optimizer, the scheduler and the Engine
// from a TrainConfig (apps/*_from_config.hpp), resumes if asked, and trains: evaluation after
// every epoch (gather_for_metrics over the test set), metrics.jsonl on rank 0 (DESIGN.md
// section 7), a progress display, checkpoints every project.save_every_steps steps and at the
// end, and a clean stop on SIGTERM/SIGUSR1 (finish the step, save, return).
//
// training_run.cpp reads as the run goes: set-up, resume, then per optimizer step train,
// log, save and stop, evaluation after every epoch, and the finish.
//
// project.dir at start, before anything is built: a fresh run (project.resume: none) into a
// folder that holds another run's metrics.jsonl or committed checkpoints throws ConfigError
// (exit 2) saying how to resume, choose another dir or overwrite; project.overwrite: true
// removes that run instead (previous_run.hpp). metrics.jsonl then gets this run's header
// line, and a resumed run's marker (DESIGN.md section 7).
//
// Checkpoint folder at start, before the first step: abandoned temporary folders are removed
// (the checkpoint manager is created then), and a run whose saves would find their folder
// taken throws ConfigError (exit 2): checkpoints newer than the one resumed from (automatic
// naming continues at its number + 1), or step_<S> folders beyond the current step
// (automatic_checkpoint_naming: false). Checkpoints are never overwritten.
//
// Before the model is built, rank 0 opens the data sets and checks the memory the run needs
// (memory_budget.hpp), every rank following its verdict (run_start.hpp, agree_on_rank0).
// `resume: latest` loads the newest checkpoint that passes verification: Engine::load_state()
// names newer automatic ones that fail (kept, and numbered past); a step_<S> folder that fails
// is a ConfigError naming it. training.max_consecutive_skipped_steps
// skipped steps in a row throw AgreedError (exit 1); a run that skipped steps says so at the end.
//
// Length of the run: steps_per_epoch = ceil(batches per rank / gradient_accumulation_steps)
// (the loader's last batch ends an accumulation window); total = epochs * steps_per_epoch,
// or max_steps when that is smaller. The scheduler is sized by that total. A resumed run counts
// its total again from the checkpoint's position (another global batch gives another number of
// batches per epoch) and resizes the scheduler to it.

#include <cstdint>
#include <cstdio>
#include <string>

#include "injected_fault.hpp"
#include "log.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "stop_signal.hpp"
#include "train_config.hpp"
#include "watchdog.hpp"

namespace mpitrain::app {

struct TrainingOutcome {
  std::int64_t steps = 0;           // optimizer steps reached (resumed ones included)
  std::int64_t epochs_done = 0;     // completed epochs
  double test_accuracy = -1.0;      // last evaluation, in [0, 1]; -1 when none ran
  double test_loss = 0.0;
  double seconds = 0.0;             // training time of this process (resumed runs: its part)
  bool stopped_by_signal = false;   // SIGTERM/SIGUSR1: saved and stopped early
  std::string last_checkpoint;      // folder of the last checkpoint saved, if any
};

// Runs the training described by `config`. Collective: every rank calls it. `log` receives
// rank 0's progress (on log.out()) and messages; `fault` is for tests only (injected_fault.hpp). Throws
// ConfigError for settings that only turn out wrong with the data in hand, and
// std::exception for runtime failures.
TrainingOutcome run_training(const TrainConfig& config, const Communicator& comm,
                             const StopSignal& stop, Watchdog& watchdog, Log& log,
                             const InjectedFault& fault = {});

}  // namespace mpitrain::app
