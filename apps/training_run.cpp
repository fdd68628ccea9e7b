#include "training_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "agreed_error.hpp"
#include "checkpoint_folders.hpp"
#include "config_checked.hpp"
#include "datasets_from_config.hpp"
#include "memory_budget.hpp"
#include "engine_from_config.hpp"
#include "evaluation.hpp"
#include "metrics_log.hpp"
#include "model_from_config.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/checkpoint/rank_agreement.hpp"
#include "mpitrain/checkpoint/file_hash.hpp"
#include "mpitrain/checkpoint/state_file.hpp"
#include "mpitrain/engine/engine.hpp"
#include "optimizer_from_config.hpp"
#include "previous_run.hpp"
#include "progress.hpp"
#include "run_start.hpp"
#include "scheduler_from_config.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Returns "s" unless `n` is 1: "1 rank", "2 ranks".
const char* plural(std::int64_t n) { return n == 1 ? "" : "s"; }

// How long the run is (training_run.hpp): batches per rank and epoch, optimizer steps per
// epoch, optimizer steps of the whole run.
struct RunLength {
  std::int64_t batches = 0;
  std::int64_t steps_per_epoch = 0;
  std::int64_t total = 0;
};

// Collective (one allreduce): every rank refuses a run that gives some rank no batch.
RunLength run_length(const TrainConfig& config, const data::DataLoader& loader,
                     const Communicator& comm) {
  RunLength n;
  n.batches = static_cast<std::int64_t>(loader.batches_per_epoch());
  // Agreed: with even_batches false a rank may get no batch while the others get some, and a
  // ConfigError on that rank alone would leave the others waiting in prepare's collective.
  if (comm.allreduce_value(n.batches == 0 ? 1 : 0, ReduceOp::max) == 1) {
    throw ConfigError(fmt::format(
        "data: {} gives some rank no batch per epoch (batch_size {} on {} ranks, drop_last {}, "
        "even_batches {}): use fewer ranks, a smaller batch_size, or even_batches: true",
        loader.dataset().describe(), config.data.batch_size, comm.size(), config.data.drop_last,
        config.data.even_batches));
  }
  const std::int64_t accumulation = config.training.gradient_accumulation_steps;
  n.steps_per_epoch = (n.batches + accumulation - 1) / accumulation;
  n.total = config.training.epochs * n.steps_per_epoch;
  if (config.training.max_steps) n.total = std::min(n.total, *config.training.max_steps);
  return n;
}

// Returns the run's total optimizer steps counted from a resumed position (`step` done,
// `position` batches into `epoch`): the steps done, the rest of this epoch at this run's
// batches per epoch (the accumulation window restarts at a resume), and the epochs after it,
// capped by max_steps. With the saved run's global batch it is run_length's total; with
// another (another world size and a per-rank batch_size) an epoch has another number of
// batches, and the saved length would end the run early or late.
std::int64_t resumed_total(const TrainConfig& config, const RunLength& n, std::int64_t step,
                           std::int64_t epoch, std::int64_t position) {
  const std::int64_t accumulation = config.training.gradient_accumulation_steps;
  std::int64_t total = step;
  if (epoch < config.training.epochs) {
    total += (std::max<std::int64_t>(0, n.batches - position) + accumulation - 1) / accumulation;
    total += (config.training.epochs - epoch - 1) * n.steps_per_epoch;
  }
  if (config.training.max_steps) total = std::min(total, *config.training.max_steps);
  return total;
}

// Returns "a, b, c" of the first few names, and how many more there are.
std::string name_list(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 5;
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > kShown) text += fmt::format(" and {} more", names.size() - kShown);
  return text;
}

// Returns why a save of this run would find its folder taken, or "" when none would: the
// checkpoints after the one resumed from (automatic naming continues at its number + 1),
// or step_<S> folders after the current step (naming off). Checkpoints are never
// overwritten, so without this check such a run would train and then fail at its first save.
std::string folders_in_the_way(const TrainConfig& config, const checkpoint::CheckpointManager& manager,
                               std::int64_t step) {
  const fs::path dir = manager.checkpoints_dir();
  std::vector<std::string> names;
  if (config.project.automatic_checkpoint_naming) {
    for (const checkpoint::CheckpointInfo& info : manager.in_the_way()) {
      names.push_back(info.dir.filename().string());
    }
    if (names.empty()) return "";
    return fmt::format(
        "{}: project.resume: {} is not the newest checkpoint of {}: {} {} after it, and this run would save {} "
        "next (checkpoints are never overwritten). Remove the newer checkpoints to continue from this one, "
        "or resume from latest",
        config.origin("project.resume"), config.project.resume, dir.string(), name_list(names),
        names.size() == 1 ? "comes" : "come", checkpoint::checkpoint_folder_name(manager.next_iteration()));
  }
  std::string newest;
  for (const CheckpointFolder& f : step_folders(dir)) {
    if (f.number > step) names.push_back(f.dir.filename().string());
    if (f.committed) newest = f.dir.string();
  }
  if (names.empty()) return "";
  return fmt::format(
      "{}: project.automatic_checkpoint_naming: false saves {} for steps after {}, and {} {} already "
      "(checkpoints are never overwritten). Remove {}, choose another project.dir{}",
      config.origin("project.automatic_checkpoint_naming"), (dir / "step_<S>").string(), step,
      name_list(names), names.size() == 1 ? "exists" : "exist", names.size() == 1 ? "it" : "them",
      newest.empty() ? std::string() : fmt::format(", or resume from the newest (project.resume: {})", newest));
}

// Everything the run is made of. Everything the engine refers to is declared before it, so
// it outlives the engine.
// An ExternalModel attaches itself to the engine and is taken off it first.
struct RunParts {
  DataSets sets;
  Model model;
  std::unique_ptr<nn::Optimizer> optimizer;  // an ExternalModel's: its LearningRate only
  std::optional<nn::LrScheduler> scheduler;
  std::optional<SchedulerCheckpoint> scheduler_checkpoint;  // an ExternalModel's scheduler
  std::optional<data::DataLoader> train_loader;
  std::optional<data::DataLoader> test_loader;
  std::unique_ptr<Engine> engine;
  RunLength length;
  RunParts() = default;
  RunParts(const RunParts&) = delete;
  RunParts& operator=(const RunParts&) = delete;
  ~RunParts() {
    if (model.external) model.external->unprepare();
  }
};

// What flows from one step of the training loop to the next.
struct LoopState {
  std::int64_t resumed_at = 0;            // the step the run started (or resumed) at
  std::int64_t last_saved = 0;            // the step of the last checkpoint (or the start)
  std::int64_t last_evaluated_epoch = -1;
  Clock::time_point train_start;
  Clock::time_point last_log_time;        // of the last metrics line
  std::uint64_t last_log_samples = 0;     // engine.samples_seen() then
  double loss_sum = 0.0;                  // this rank's micro-batch losses since then
  double loss_count = 0.0;
  std::int64_t skipped_in_a_row = 0;      // optimizer steps skipped since the last one taken
  data::Batch batch;                      // buffers reused by every micro-step
  Tensor grad;
};

// One run of run_training(): its steps as methods, in the order they happen.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, const Communicator& comm, const StopSignal& stop, Watchdog& watchdog,
              Log& log, const InjectedFault& fault)
      : config_(config), comm_(comm), stop_(stop), watchdog_(watchdog), log_(log), fault_(fault) {}

  TrainingOutcome run() {
    // Every check that can refuse the run (data, memory, batches, the model) comes before
    // project.overwrite removes the earlier run: a refused run destroys nothing.
    set_up_model();
    set_up_loaders();
    check_project_dir();
    set_up_output();
    clean_up_checkpoint_folder();
    resume();
    train();
    finish();
    return outcome_;
  }

 private:
  // ---- set-up ----------------------------------------------------------------------------

  // A fresh run into a project.dir that holds another run's metrics or checkpoints is a
  // ConfigError, unless project.overwrite removes that run first (previous_run.hpp). A
  // resumed run continues the one there, and overwrite is ignored (it says so). Rank 0
  // looks and removes (every rank sees the same shared folder); the others learn by a
  // collective, so that no rank has started before the folder is clean.
  void check_project_dir() {
    if (config_.project.resume != "none") {
      if (config_.project.overwrite) {
        say(fmt::format("project.overwrite: true is ignored: project.resume: {} continues the run in {} "
                        "(nothing is removed)",
                        config_.project.resume, config_.project.dir));
      }
      return;
    }
    std::vector<std::string> found;
    if (main()) found = previous_run_files(config_.project.dir);
    if (main() && !found.empty() && config_.project.overwrite) {
      const std::vector<std::string> removed = remove_previous_run(config_.project.dir);
      say(fmt::format("project.overwrite: removed the earlier run's {} from {}", fmt::join(removed, ", "),
                      config_.project.dir));
      found.clear();
    }
    const double mine = found.empty() ? 0.0 : 1.0;
    double refused = 0.0;
    comm_.allreduce(&mine, &refused, 1, DType::f64, ReduceOp::max);
    if (refused > 0.0) throw ConfigError(main() ? previous_run_message(config_, found) : std::string());
  }

  // The data sets, the model, its optimizer and the engine. Rank 0 opens the data sets and
  // checks the memory the run needs first; the other ranks follow its verdict, so a bad file
  // or size is one config error (exit 2), not a failure of every rank.
  void set_up_model() {
    watchdog_.progress("loading the data sets");
    agree_on_rank0(comm_, [&] {
      p_.sets = make_datasets(config_);
      const MemoryNeed need = memory_need(config_, p_.sets.train->feature_size(), p_.sets.num_classes, comm_.size());
      check_memory(config_, need, comm_.local_size(), available_memory_bytes());
    });
    if (!main()) {
      // What rank 0 could read, this rank cannot (a file not shared with its node): a failure
      // of this rank alone, which must end the job (MPI_Abort), not a config error.
      try {
        p_.sets = make_datasets(config_);
      } catch (const ConfigError& e) {
        throw std::runtime_error(e.what());
      }
    }
    p_.model = make_model(config_, p_.sets.train->feature_size(), p_.sets.num_classes);
    p_.optimizer = p_.model.external ? std::make_unique<LearningRate>(config_.optimizer.lr)
                                     : make_optimizer(config_, p_.model.module->parameters());
    EngineConfig engine_settings = config_checked("config", [&] { return engine_config(config_); });
    // The engine's warnings share the trainer's log: rank prefix, levels, the progress line.
    engine_settings.log = [this](std::string_view level, std::string_view text) {
      log_.write(level == "info" ? LogLevel::info : level == "warning" ? LogLevel::warn : LogLevel::error, text);
    };
    p_.engine = std::make_unique<Engine>(std::move(engine_settings), comm_);
  }

  // The training loader, the length of the run and the scheduler sized by it, the engine's
  // preparation, and the test loader.
  void set_up_loaders() {
    Engine& engine = *p_.engine;
    const data::DataLoaderOptions train_options = train_loader_options(config_);
    p_.train_loader.emplace(
        config_checked("data.batch_size", [&] { return engine.make_loader(p_.sets.train, train_options); }));
    p_.length = run_length(config_, *p_.train_loader, comm_);
    p_.scheduler.emplace(make_scheduler(config_, *p_.optimizer, p_.length.total));
    if (p_.model.external) {
      prepare_external_model();
    } else {
      config_checked("data", [&] {
        engine.prepare(*p_.model.module, *p_.optimizer, *p_.train_loader, &*p_.scheduler);
      });
    }
    engine.set_config_text(config_.yaml);
    if (p_.sets.test && config_.training.eval) {
      p_.test_loader.emplace(engine.make_loader(p_.sets.test, test_loader_options(config_)));
    }
  }

  // An ExternalModel registers itself (parameters, buffers, its optimizer); the engine then
  // gets the training loader, steps the scheduler, and saves it under /custom/scheduler.
  void prepare_external_model() {
    Engine& engine = *p_.engine;
    config_checked("model", [&] { p_.model.external->prepare(engine, *p_.optimizer); });
    config_checked("data", [&] { engine.prepare_loader(*p_.train_loader, true); });
    engine.set_scheduler_step([this] { p_.scheduler->step(); });
    p_.scheduler_checkpoint.emplace(*p_.scheduler);
    engine.register_for_checkpointing("scheduler", *p_.scheduler_checkpoint);
  }

  // metrics.jsonl (rank 0), the progress display, and the first line.
  void set_up_output() {
    if (main()) {
      fs::create_directories(config_.project.dir);
      metrics_.emplace((fs::path(config_.project.dir) / "metrics.jsonl").string());
    }
    progress_.emplace(p_.length.total, config_.training.log_every, log_);
    const int nodes = comm_.node_count();
    say(fmt::format("mpitrain: {} rank{} on {} node{}; train {} ({} batches of {} per rank and epoch); "
                    "{} steps ({} per epoch)",
                    comm_.size(), plural(comm_.size()), nodes, plural(nodes), p_.sets.train->describe(),
                    p_.length.batches, config_.data.batch_size, p_.length.total, p_.length.steps_per_epoch));
    const MemoryReport m = p_.engine->memory_report();
    constexpr double kMiB = 1024.0 * 1024.0;
    say(fmt::format("memory per rank (distributed.zero_stage {}): parameters {:.2f} MiB, gradients {:.2f} MiB, "
                    "optimizer state {:.2f} MiB, communication buffers {:.2f} MiB",
                    config_.distributed.zero_stage, static_cast<double>(m.parameter_bytes) / kMiB,
                    static_cast<double>(m.gradient_bytes) / kMiB, static_cast<double>(m.optimizer_state_bytes) / kMiB,
                    static_cast<double>(m.comm_bytes) / kMiB));
  }

  // The checkpoint manager, first: creating it is collective and removes the folders that
  // interrupted saves left behind, so that happens now rather than at the first save.
  void clean_up_checkpoint_folder() {
    watchdog_.progress("cleaning up the checkpoint folder");
    for (const fs::path& removed : p_.engine->checkpoints().removed_at_start()) {
      say(fmt::format("removed an abandoned checkpoint folder: {}", removed.string()));
    }
  }

  // ---- resume ----------------------------------------------------------------------------

  void resume() {
    watchdog_.progress("resuming");
    Engine& engine = *p_.engine;
    const checkpoint::CheckpointManager& manager = engine.checkpoints();
    const std::string& resume = config_.project.resume;
    std::optional<fs::path> from;
    if (resume == "latest") {
      from = resume_latest();
    } else if (resume != "none") {
      from = fs::path(resume);
      engine.load_state(*from);
    }
    // Rank 0 looks (every rank sees the same shared folder) and speaks for all.
    std::string in_the_way;
    if (main()) in_the_way = folders_in_the_way(config_, manager, step());
    if (engine.reduce(in_the_way.empty() ? 0.0 : 1.0, ReduceOp::max) > 0.0) throw ConfigError(in_the_way);
    if (engine.step_count() > 0 || engine.batches_in_epoch() > 0) {
      say(fmt::format("resumed at step {} (epoch {}, batch {} of the epoch)", engine.step_count(), engine.epoch(),
                      engine.batches_in_epoch()));
      fit_length_to_resumed_position();
    }
    if (metrics_) write_run_start(from);
    s_.resumed_at = step();
    s_.last_saved = step();
  }

  // Counts the run's steps again from the resumed position, and resizes the scheduler to
  // them: the schedule (its linear or cosine decay) then ends with the run, whatever the saved
  // run's length was (another global batch, epochs or max_steps). Says what changed.
  void fit_length_to_resumed_position() {
    const std::int64_t total = resumed_total(config_, p_.length, step(), epoch(),
                                             static_cast<std::int64_t>(p_.engine->batches_in_epoch()));
    if (total != p_.length.total) {
      say(fmt::format("the run ends at step {}, counted from the resumed position at {} batches per rank and "
                      "epoch (not {}, the length of a run started afresh with this config)",
                      total, p_.length.batches, p_.length.total));
      p_.length.total = total;
      progress_.emplace(p_.length.total, config_.training.log_every, log_);
    }
    nn::LrScheduler& scheduler = *p_.scheduler;
    const std::int64_t saved = scheduler.total_steps();
    if (saved == total) return;
    scheduler.set_total_steps(total);
    // A constant schedule (after its warm-up) does not depend on the run's length: nothing to say.
    if (scheduler.kind() == nn::LrScheduleKind::constant) return;
    say(fmt::format("scheduler: the checkpoint's schedule spans {} steps and this run {}: resized to {} "
                    "(lr {:.6g} at step {})",
                    saved, total, total, scheduler.last_lr(), step()));
  }

  // Returns the checkpoint loaded (none when there is none yet). With automatic naming
  // Engine::load_state() chooses: the newest committed checkpoint that passes verification,
  // numbering the next save past newer ones that fail (named in a warning). With step_<S>
  // folders it is the newest committed one: a damaged one cannot be passed over, since a later
  // save would need its name, so the run is refused naming it. Rank 0 looks; a listing or
  // verification error there is every rank's (agree_on_rank0), never a wait on the others.
  // When the folder holds only the other naming's checkpoints (the config's naming was
  // changed), the newest of them is loaded, as `trainer eval --checkpoint latest` finds it,
  // and a line says so: starting afresh beside them would throw the run's progress away.
  std::optional<fs::path> resume_latest() {
    Engine& engine = *p_.engine;
    const fs::path dir = engine.checkpoints().checkpoints_dir();
    const bool automatic = config_.project.automatic_checkpoint_naming;
    std::string chosen;
    std::string other;
    std::vector<std::string> damaged;
    agree_on_rank0(comm_, [&] {
      chosen = automatic ? newest_automatic_checkpoint() : newest_step_folder(dir);
      if (chosen.empty()) other = newest_sound_of_other_naming(dir, damaged);
      if (other.empty() && !damaged.empty()) {
        throw ConfigError(fmt::format("{}: project.resume: latest: every checkpoint in {} fails verification: {}",
                                      config_.origin("project.resume"), dir.string(), fmt::join(damaged, "; ")));
      }
    });
    chosen = checkpoint::broadcast_string(comm_, chosen, 0);
    other = checkpoint::broadcast_string(comm_, other, 0);
    if (main() && !damaged.empty()) {
      log_.warn("resume: latest: passed over (kept as they are) newer checkpoints that fail verification: {}",
                fmt::join(damaged, "; "));
    }
    if (!other.empty()) {
      const std::string_view own_naming = automatic ? "checkpoint_<N>" : "step_<S>";
      say(fmt::format("resume: latest: {} holds no {} folder; resuming from the newest of the other naming, {} "
                      "(this run saves {})",
                      dir.string(), own_naming, other, own_naming));
      return engine.load_state(fs::path(other)).dir;
    }
    if (chosen.empty()) {
      say(fmt::format("resume: latest: no checkpoint in {} yet, starting from scratch", dir.string()));
      return std::nullopt;
    }
    return automatic ? engine.load_state().dir : engine.load_state(fs::path(chosen)).dir;
  }

  // Returns the newest committed folder of `dir` named the other way than this config names
  // its saves that passes verification, or "" when there is none. Newer ones that fail are
  // passed over (this run never saves a name of their kind) and added to `damaged` with why.
  std::string newest_sound_of_other_naming(const fs::path& dir, std::vector<std::string>& damaged) const {
    const auto other = config_.project.automatic_checkpoint_naming ? CheckpointFolder::Naming::step
                                                                   : CheckpointFolder::Naming::automatic;
    const std::vector<CheckpointFolder> folders = committed_checkpoint_folders(dir);
    for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
      if (it->naming != other) continue;
      try {
        p_.engine->checkpoints().verify(it->dir);
        return it->dir.string();
      } catch (const checkpoint::CheckpointError& e) {
        damaged.push_back(fmt::format("{} ({})", it->dir.filename().string(), e.what()));
      }
    }
    return "";
  }

  // Returns the newest committed checkpoint_<N> (Engine::load_state() verifies), or "".
  std::string newest_automatic_checkpoint() const {
    const std::optional<fs::path> latest = p_.engine->checkpoints().latest();
    return latest ? latest->string() : std::string();
  }

  // Returns the newest committed step_<S> folder of `dir`, or "" when there is none. Throws
  // ConfigError when it fails verification.
  std::string newest_step_folder(const fs::path& dir) const {
    std::string newest;
    for (const CheckpointFolder& f : step_folders(dir)) {
      if (f.committed) newest = f.dir.string();
    }
    if (newest.empty()) return newest;
    try {
      p_.engine->checkpoints().verify(newest);
    } catch (const checkpoint::CheckpointError& e) {
      throw ConfigError(fmt::format(
          "{}: project.resume: latest: {} fails verification ({}); a later save would need its name, so it "
          "cannot be passed over: move it away to resume from the one before it",
          config_.origin("project.resume"), newest, e.what()));
    }
    return newest;
  }

  // The run's header line in metrics.jsonl (rank 0), once the run is known to start, and for
  // a resumed run (`from`: the checkpoint, or none when resume: latest found none) the
  // marker: lines an interrupted run logged after this step are superseded (DESIGN.md
  // section 7).
  void write_run_start(const std::optional<fs::path>& from) {
    const std::string& yaml = config_.yaml;
    const RunHeader header{
        new_run_id(), utc_now_iso8601(), checkpoint::mpitrain_version(), comm_.size(),
        checkpoint::xxh3_128_hex(std::span(reinterpret_cast<const unsigned char*>(yaml.data()), yaml.size()))};
    metrics_->write(header);
    log_.debug("run {} started {}, config {}", header.run_id, header.start_time, header.config_hash);
    if (config_.project.resume != "none") {
      metrics_->write(ResumeMarker{step(), epoch(), from ? from->string() : std::string()});
    }
  }

  // ---- the training loop -----------------------------------------------------------------

  void train() {
    Engine& engine = *p_.engine;
    s_.train_start = Clock::now();
    s_.last_log_time = s_.train_start;
    s_.last_log_samples = engine.samples_seen();
    while (step() < p_.length.total) {
      watchdog_.progress("training step", step() + 1);
      if (!engine.next_batch(s_.batch)) {  // the epoch is over; the loader stands at the next one
        ++outcome_.epochs_done;
        evaluate_epoch(static_cast<std::int64_t>(engine.epoch()) - 1);
        if (static_cast<std::int64_t>(engine.epoch()) >= config_.training.epochs) break;
        continue;
      }
      // The micro-step's guard spans the whole iteration, as it always has: the step, the
      // save and the stop check happen inside the micro-step that stepped, so a checkpoint
      // records the same engine counters.
      auto micro = engine.accumulate();
      if (!train_micro_batch()) continue;
      const std::int64_t done = optimizer_step();
      trigger_injected_fault_for_tests(fault_, comm_, done);
      if (config_.project.save_every_steps && done % *config_.project.save_every_steps == 0) save();
      if (stop_requested(done)) break;
    }
  }

  // Runs forward, the objective's loss and backward on the current batch, inside the
  // micro-step train() started. Returns true when the gradients are synchronised, so that an
  // optimizer step is due.
  bool train_micro_batch() {
    Engine& engine = *p_.engine;
    if (p_.model.external) {
      s_.loss_sum += p_.model.external->train_batch(s_.batch);
    } else {
      const Tensor output = p_.model.module->forward(s_.batch.features);
      s_.loss_sum += p_.model.objective->loss(output, s_.batch, s_.grad);
      engine.backward(s_.grad);
    }
    s_.loss_count += 1.0;
    return engine.sync_gradients();
  }

  // Clips (or only measures, for a metrics line) the gradient norm, steps the optimizer and
  // logs. Returns the step just completed.
  std::int64_t optimizer_step() {
    Engine& engine = *p_.engine;
    const std::int64_t done = step() + 1;
    const bool log_now = done % config_.training.log_every == 0 || done == p_.length.total;
    double grad_norm = std::numeric_limits<double>::quiet_NaN();
    if (config_.training.max_grad_norm) {
      grad_norm = engine.clip_grad_norm(*config_.training.max_grad_norm);
    } else if (log_now) {
      grad_norm = engine.clip_grad_norm(std::numeric_limits<double>::infinity());  // measures only
    }
    const double lr = p_.optimizer->lr();
    const float scale = engine.loss_scale();
    const bool stepped = engine.step();
    if (p_.model.external) {
      p_.model.external->zero_grad();
    } else {
      engine.zero_grad();
    }
    check_skipped(stepped, done);
    if (log_now) {
      log_metrics(done, lr, grad_norm, scale);
    } else if (main()) {
      progress_->update(epoch(), done, s_.loss_sum / std::max(1.0, s_.loss_count), samples_per_s());
    }
    return done;
  }

  // Counts steps skipped in a row (nan_policy skip, or the fp16 scaler backing off: every
  // rank agrees, the gradients being synchronised) and throws AgreedError when they reach
  // training.max_consecutive_skipped_steps.
  void check_skipped(bool stepped, std::int64_t done) {
    s_.skipped_in_a_row = stepped ? 0 : s_.skipped_in_a_row + 1;
    const std::int64_t limit = config_.training.max_consecutive_skipped_steps;
    if (limit == 0 || s_.skipped_in_a_row < limit) return;
    throw AgreedError(fmt::format(
        "{}: training.max_consecutive_skipped_steps: {} optimizer steps in a row were skipped for inf/NaN "
        "gradients (steps {} to {}, training.nan_policy: {}, training.mixed_precision: {}); stopping the run",
        config_.origin("training.max_consecutive_skipped_steps"), s_.skipped_in_a_row,
        done - s_.skipped_in_a_row + 1, done, config_.training.nan_policy, config_.training.mixed_precision));
  }

  // ---- log ---------------------------------------------------------------------------------

  // Writes a metrics line (the loss averaged over the micro-batches and ranks since the last
  // one) and updates the progress display. Collective.
  void log_metrics(std::int64_t done, double lr, double grad_norm, float scale) {
    Engine& engine = *p_.engine;
    Tensor sums({2});
    sums.data()[0] = static_cast<float>(s_.loss_sum);
    sums.data()[1] = static_cast<float>(s_.loss_count);
    const Tensor total_sums = engine.reduce(sums);
    const double loss = total_sums.data()[0] / std::max(1.0f, total_sums.data()[1]);
    const double rate = samples_per_s();
    if (metrics_) {
      metrics_->write(TrainMetrics{done, epoch(), loss, lr, grad_norm, static_cast<double>(scale),
                                   static_cast<std::int64_t>(engine.state().skipped_steps), rate,
                                   seconds_since(s_.train_start)});
    }
    if (main()) progress_->update(epoch(), done, loss, rate);
    s_.last_log_time = Clock::now();
    s_.last_log_samples = engine.samples_seen();
    s_.loss_sum = 0.0;
    s_.loss_count = 0.0;
  }

  // Returns every rank's samples per second since the last metrics line.
  double samples_per_s() const {
    const double interval = seconds_since(s_.last_log_time);
    return interval > 0 ? static_cast<double>(p_.engine->samples_seen() - s_.last_log_samples) / interval : 0.0;
  }

  // ---- evaluate ----------------------------------------------------------------------------

  // Evaluates on the test set (if any) after `epoch`, and reports it.
  void evaluate_epoch(std::int64_t epoch) {
    s_.last_evaluated_epoch = epoch;
    if (!p_.test_loader) return;
    watchdog_.progress("evaluating after step", step());
    if (main()) progress_->begin_eval(epoch, static_cast<std::int64_t>(p_.test_loader->batches_per_epoch()));
    const auto on_batch = [this](std::int64_t done) {
      if (main()) progress_->update_eval(done);
    };
    const EvalResult r =
        p_.model.external
            ? evaluate(*p_.engine, *p_.model.external, *p_.model.objective, *p_.test_loader, on_batch)
            : evaluate(*p_.engine, *p_.model.module, *p_.model.objective, *p_.test_loader, on_batch);
    if (main()) progress_->end_eval();
    outcome_.test_accuracy = r.metric;
    outcome_.test_loss = r.loss;
    if (metrics_) {
      metrics_->write(EvalMetrics{step(), epoch, r.loss, r.metric, r.samples, p_.model.objective->metric_name()});
    }
    say(fmt::format("epoch {}: test {}, loss {:.4f} ({} examples)", epoch,
                    p_.model.objective->describe_metric(r.metric), r.loss, r.samples));
  }

  // After the loop: the epoch the last step completed is evaluated, if the loop did not.
  void evaluate_last_epoch() {
    if (outcome_.stopped_by_signal || step() <= s_.resumed_at) return;
    // The last step consumed the epoch's last batch: that epoch is complete, evaluate it.
    const bool epoch_complete = p_.train_loader->end_of_epoch();
    if (epoch_complete && s_.last_evaluated_epoch < epoch()) {
      ++outcome_.epochs_done;
      evaluate_epoch(epoch());
    } else if (s_.last_evaluated_epoch < 0 && p_.test_loader) {
      evaluate_epoch(epoch());  // max_steps ended the run mid-epoch: report where it got to
    }
  }

  // ---- save --------------------------------------------------------------------------------

  void save() {
    Engine& engine = *p_.engine;
    watchdog_.progress("saving the checkpoint of step", step());
    const checkpoint::SaveResult r =
        config_.project.automatic_checkpoint_naming
            ? engine.save_state()
            : engine.save_state(engine.checkpoints().checkpoints_dir() / step_folder_name(step()));
    s_.last_saved = step();
    outcome_.last_checkpoint = r.dir.string();
    say(fmt::format("step {}: saved {}", step(), r.dir.string()));
    for (const std::string& w : r.warnings) {
      if (main()) log_.warn("{}", w);
    }
  }

  // ---- stop --------------------------------------------------------------------------------

  // Returns true when a rank received SIGTERM/SIGUSR1. A scheduler's signal may reach some
  // ranks only: every rank asks after every step (collective), and they stop together.
  bool stop_requested(std::int64_t done) {
    if (p_.engine->reduce(stop_.requested() ? 1.0 : 0.0, ReduceOp::max) <= 0.0) return false;
    const std::string cause = stop_.signal_number() != 0 ? fmt::format("signal {}", stop_.signal_number())
                                                         : std::string("a signal received by another rank");
    say(fmt::format("stop requested ({}): saving and exiting after step {}", cause, done));
    outcome_.stopped_by_signal = true;
    return true;
  }

  // The last evaluation, the last checkpoint, the model's weights and the last line.
  void finish() {
    evaluate_last_epoch();
    if (step() != s_.last_saved) save();
    if (main()) {
      watchdog_.progress("writing the model weights");
      progress_->finish();
    }
    const checkpoint::ModelFormat format = checkpoint::parse_model_format(config_.project.save_format);
    const fs::path model_file = p_.model.external ? p_.model.external->save_model(config_.project.dir, format)
                                                  : p_.engine->save_model(config_.project.dir, format);
    outcome_.steps = step();
    outcome_.seconds = seconds_since(started_);
    const auto skipped = static_cast<std::int64_t>(p_.engine->state().skipped_steps);
    if (skipped > 0 && main()) {
      log_.warn("{} of {} optimizer steps were skipped for inf/NaN gradients (training.nan_policy: {})", skipped,
                outcome_.steps, config_.training.nan_policy);
    }
    const std::string this_run = s_.resumed_at > 0
                                     ? fmt::format(" ({} in this run)", outcome_.steps - s_.resumed_at)
                                     : std::string();
    say(fmt::format("{} after {} steps{} in {:.1f} s; weights in {}", outcome_.stopped_by_signal ? "stopped" : "done",
                    outcome_.steps, this_run, outcome_.seconds, model_file.string()));
  }

  // ---- helpers -----------------------------------------------------------------------------

  bool main() const { return comm_.rank() == 0; }
  std::int64_t step() const { return static_cast<std::int64_t>(p_.engine->step_count()); }
  std::int64_t epoch() const { return static_cast<std::int64_t>(p_.engine->epoch()); }
  // Rank 0 shows `text` on its own line (an info line of the Log, which clears the progress
  // line first and redraws it after); the other ranks stay quiet.
  void say(const std::string& text) {
    if (main()) log_.info("{}", text);
  }

  const TrainConfig& config_;
  const Communicator& comm_;
  const StopSignal& stop_;
  Watchdog& watchdog_;
  Log& log_;
  const InjectedFault& fault_;
  const Clock::time_point started_ = Clock::now();
  RunParts p_;
  std::optional<MetricsLog> metrics_;
  std::optional<Progress> progress_;
  LoopState s_;
  TrainingOutcome outcome_;
};

}  // namespace

TrainingOutcome run_training(const TrainConfig& config, const Communicator& comm, const StopSignal& stop,
                             Watchdog& watchdog, Log& log, const InjectedFault& fault) {
  return TrainingRun(config, comm, stop, watchdog, log, fault).run();
}

}  // namespace mpitrain::app
