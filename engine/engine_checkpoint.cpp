// Engine checkpoints: the engine's state as a checkpoint::CheckpointState, saved and loaded
// through the CheckpointManager (commit protocol and verification live there).
//
// Cost of save_state(): the model is written from views of the live parameters (no copy);
// the optimizer's and scheduler's state dicts are copies (2 P values for AdamW); then the
// manager's cost (build the files in memory, write, fsync, hash).
// Cost of load_state(): the manager's verification and read, one snapshot of the running
// state (model and optimizer copies, and each registered object saved into an in-memory
// HDF5 file, kept until every rank applied the checkpoint, so a failure anywhere can restore
// them), then copies into the live objects.

#include <algorithm>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/checkpointable_snapshot.hpp"
#include "mpitrain/checkpoint/rank_agreement.hpp"
#include "mpitrain/engine/detail/checkpoint_group.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;
using checkpoint::CheckpointState;
using checkpoint::StateGroup;

// Returns the declaration of group `name`, or null when the engine has no such group.
const EngineCheckpointGroup* declaration(std::span<const EngineCheckpointGroup> groups,
                                         std::string_view name) {
  for (const EngineCheckpointGroup& g : groups) {
    if (g.scope == EngineCheckpointGroup::Scope::replicated && g.name == name) return &g;
  }
  return nullptr;
}

// Throws CheckpointError unless the checkpoint holds exactly the replicated groups this
// engine has, naming the first group (by name) that one side lacks and why.
void check_same_groups(std::span<const EngineCheckpointGroup> groups, const CheckpointState& loaded,
                       const CheckpointState& current) {
  std::set<std::string> names;
  for (const auto& [name, g] : loaded.replicated) names.insert(name);
  for (const auto& [name, g] : current.replicated) names.insert(name);
  for (const std::string& name : names) {
    const bool in_checkpoint = loaded.replicated.count(name) != 0;
    const bool in_engine = current.replicated.count(name) != 0;
    const EngineCheckpointGroup* known = declaration(groups, name);
    if (known == nullptr) {
      std::string list;
      for (const EngineCheckpointGroup& g : groups) list += (list.empty() ? "" : ", ") + std::string(g.name);
      throw CheckpointError("checkpoint group /" + name + " is not a group this engine knows (" +
                            list + ")");
    }
    if (in_checkpoint && !in_engine) {
      // `needs` reads "a training loader passed to prepare()": the sentence takes it whole.
      throw CheckpointError("checkpoint group /" + name + " is saved, but this engine lacks " +
                            std::string(known->needs) + " to restore it into (to load only the "
                            "weights, use mpitrain::load_model(checkpoint folder, model))");
    }
    if (!in_checkpoint && in_engine) {
      throw CheckpointError("checkpoint has no group /" + name + ", but this engine has " +
                            std::string(known->needs) + " whose state it would need");
    }
  }
}

// Returns the saved group `g` to check and apply, or null when there is none to apply:
// the engine lacks the state (check_same_groups agreed), or the checkpoint has no rank file
// for this rank (`per_rank_missing`: it keeps its own streams). Throws when this rank's
// file lacks a per-rank group.
const StateGroup* saved_group(const EngineCheckpointGroup& g, const CheckpointState& loaded,
                              const CheckpointState& current, bool per_rank_missing, int rank) {
  const std::string name(g.name);
  if (g.scope == EngineCheckpointGroup::Scope::replicated) {
    return current.replicated.count(name) == 0 ? nullptr : &loaded.replicated.at(name);
  }
  if (per_rank_missing || current.per_rank.count(name) == 0) return nullptr;
  const auto it = loaded.per_rank.find(name);
  if (it == loaded.per_rank.end()) {
    throw CheckpointError("rank file of rank " + std::to_string(rank) + " has no group /" + name);
  }
  return &it->second;
}

// Returns this engine's own state of group `g` (present: saved_group returned non-null).
const StateGroup& current_group(const EngineCheckpointGroup& g, const CheckpointState& current) {
  const auto& groups = g.scope == EngineCheckpointGroup::Scope::replicated ? current.replicated
                                                                           : current.per_rank;
  return groups.at(std::string(g.name));
}

// Returns the warning, on every rank, that checkpoints newer than the one loaded stand in
// the way of the next automatic save ("" when none do). Loading checkpoint_<k> makes the
// next automatic save checkpoint_<k + 1>; saving never overwrites, so newer checkpoints
// would make that save fail much later. Rank 0 lists (advice only: a listing that fails
// says nothing). Collective.
std::string newer_checkpoints_warning(const checkpoint::CheckpointManager& manager,
                                      const Communicator& comm) {
  std::string warning;
  if (comm.rank() == 0) {
    static_cast<void>(checkpoint::capture_error([&] {
      std::string newer;
      for (const checkpoint::CheckpointInfo& c : manager.in_the_way()) {
        newer += (newer.empty() ? "" : ", ") + c.dir.filename().string();
      }
      if (newer.empty()) return;
      warning = "newer checkpoints exist (" + newer + "): the next automatic save, checkpoint_" +
                std::to_string(manager.next_iteration()) + ", will fail; remove them before saving";
    }));
  }
  return checkpoint::broadcast_string(comm, warning, 0);
}

// Returns the warnings of loading a checkpoint of `saved_world` ranks on `world` ranks.
std::vector<std::string> world_size_warnings(int saved_world, int world) {
  std::vector<std::string> out;
  if (saved_world == world) return out;
  out.push_back("the checkpoint was saved by " + std::to_string(saved_world) +
                " ranks and is loaded by " + std::to_string(world));
  if (world > saved_world) {
    const std::string which = world - saved_world == 1
                                  ? "rank " + std::to_string(saved_world) + " has"
                                  : "ranks " + std::to_string(saved_world) + ".." +
                                        std::to_string(world - 1) + " have";
    out.push_back(which + " no rank file: the random streams this program derived from the "
                          "seed and the rank are kept");
  }
  return out;
}

// Throws CheckpointError unless the checkpoint's registered objects are this engine's.
void check_registered_objects(const std::vector<std::string>& saved,
                              const std::map<std::string, checkpoint::Checkpointable*>& custom) {
  std::vector<std::string> registered;
  for (const auto& [name, object] : custom) registered.push_back(name);
  if (registered == saved) return;
  std::string saved_list, have_list;
  for (const std::string& n : saved) saved_list += (saved_list.empty() ? "" : ", ") + n;
  for (const std::string& n : registered) have_list += (have_list.empty() ? "" : ", ") + n;
  throw CheckpointError("the checkpoint's registered objects (/custom: " +
                        (saved_list.empty() ? std::string("none") : saved_list) +
                        ") differ from this engine's (" +
                        (have_list.empty() ? std::string("none") : have_list) + ")");
}

}  // namespace

// ---- state <-> CheckpointState ----------------------------------------------------------------

CheckpointState Engine::capture_state(bool views) const {
  CheckpointState st;
  for (const EngineCheckpointGroup& g : checkpoint_groups()) {
    if (!g.present(*this)) continue;
    auto& groups = g.scope == EngineCheckpointGroup::Scope::replicated ? st.replicated : st.per_rank;
    groups.emplace(std::string(g.name), g.capture(*this, views));
  }
  st.config_yaml = config_text_;
  for (const auto& [name, object] : custom_) st.custom[name] = object;
  st.step = static_cast<std::int64_t>(state_.step);
  st.epoch = static_cast<std::int64_t>(state_.epoch);
  st.zero_stage = shard_optimizer_ ? 1 : 0;
  return st;
}

void Engine::apply_state(const CheckpointState& loaded, bool per_rank_missing,
                         std::vector<std::string>& warnings) {
  const CheckpointState current = capture_state(true);
  const int rank = comm_.rank();
  // 1. Check everything before changing anything.
  check_same_groups(checkpoint_groups(), loaded, current);
  for (const EngineCheckpointGroup& g : checkpoint_groups()) {
    const StateGroup* saved = saved_group(g, loaded, current, per_rank_missing, rank);
    if (saved != nullptr) g.check(*this, *saved, current_group(g, current));
  }
  // 2. Apply, in the table's order. Anything thrown from here on is rolled back by the
  // caller (load_state).
  for (const EngineCheckpointGroup& g : checkpoint_groups()) {
    const StateGroup* saved = saved_group(g, loaded, current, per_rank_missing, rank);
    if (saved != nullptr) g.apply(*this, *saved, warnings);
  }
  phase_.restart_window();
}

// ---- public API ---------------------------------------------------------------------------------

checkpoint::CheckpointManager& Engine::checkpoints() {
  if (!checkpoints_) {
    idle_stream();
    checkpoints_ = std::make_unique<checkpoint::CheckpointManager>(config_.project, comm_);
  }
  return *checkpoints_;
}

void Engine::register_for_checkpointing(std::string name, checkpoint::Checkpointable& object) {
  if (name.empty() || name.find('/') != std::string::npos) {
    throw std::invalid_argument("Engine::register_for_checkpointing: '" + name +
                                "' is not a plain name (non-empty, no '/')");
  }
  if (!custom_.emplace(name, &object).second) {
    throw std::invalid_argument("Engine::register_for_checkpointing: '" + name +
                                "' is already registered");
  }
}

void Engine::require_step_boundary(std::string_view who) const {
  if (phase_.at_step_boundary()) return;
  const std::size_t accumulated = phase_.accumulated_micro_steps();
  throw std::logic_error(std::string(who) + " (rank " + std::to_string(comm_.rank()) +
                         "): called inside an accumulation window (" +
                         std::to_string(accumulated) + " micro-step(s) of gradients accumulated" +
                         (phase_.step_pending() ? ", step() not called yet" : "") +
                         "); a checkpoint holds no gradients, so save after step()");
}

checkpoint::SaveResult Engine::save_state() {
  require_step_boundary("Engine::save_state");
  checkpoint::CheckpointManager& manager = checkpoints();
  idle_stream();
  return manager.save(capture_state(true), comm_);
}

checkpoint::SaveResult Engine::save_state(const fs::path& dir) {
  require_step_boundary("Engine::save_state");
  checkpoint::CheckpointManager& manager = checkpoints();
  idle_stream();
  return manager.save(capture_state(true), comm_, dir);
}

Engine::LoadReport Engine::load_state() {
  checkpoint::CheckpointManager& manager = checkpoints();
  idle_stream();
  // Rank 0 chooses, so every rank loads the same folder even if a listing races a save: the
  // newest committed checkpoint that passes verification. Newer ones that fail it are kept,
  // named in a warning, and numbered past (the next save follows the newest). When every one
  // fails, the newest is loaded, and that names its damage.
  std::string chosen;
  std::string skipped;
  std::int64_t next = 0;
  std::optional<std::string> error;
  if (comm_.rank() == 0) {
    error = checkpoint::capture_error([&] {
      const std::vector<checkpoint::CheckpointInfo> all = manager.list();
      if (all.empty()) {
        throw CheckpointError("no committed checkpoint in '" + manager.checkpoints_dir().string() +
                              "'");
      }
      for (auto it = all.rbegin(); it != all.rend() && chosen.empty(); ++it) {
        // Only damage (CheckpointError) is passed over: a file system error (EIO, EACCES)
        // may be transient, and loading an older checkpoint would lose the newer one's work.
        try {
          manager.verify(it->dir);
          chosen = it->dir.string();
        } catch (const CheckpointError& damage) {
          skipped += (skipped.empty() ? "" : "; ") + it->dir.filename().string() +
                     " fails verification (" + damage.what() + ")";
        }
      }
      if (chosen.empty()) {
        chosen = all.back().dir.string();
        skipped.clear();
      }
      next = all.back().number + 1;
    });
  }
  checkpoint::agree_on_success(comm_, error, "Engine::load_state");
  chosen = checkpoint::broadcast_string(comm_, chosen, 0);
  skipped = checkpoint::broadcast_string(comm_, skipped, 0);
  if (skipped.empty()) return load_checkpoint(fs::path(chosen), {}, std::nullopt);
  comm_.broadcast(std::span<std::int64_t>(&next, 1), 0);
  return load_checkpoint(fs::path(chosen),
                         {"newer checkpoints were skipped and are kept: " + skipped +
                          "; the next automatic save is checkpoint_" + std::to_string(next)},
                         next);
}

Engine::LoadReport Engine::load_state(const fs::path& dir) {
  return load_checkpoint(dir, {}, std::nullopt);
}

Engine::LoadReport Engine::load_checkpoint(const fs::path& dir, std::vector<std::string> warnings,
                                           std::optional<std::int64_t> next_iteration) {
  if (phase_.micro_step_open()) {
    throw std::logic_error("Engine::load_state (rank " + std::to_string(comm_.rank()) +
                           "): called inside an accumulate() micro-step; load before it starts "
                           "or after its guard ends");
  }
  checkpoint::CheckpointManager& manager = checkpoints();
  idle_stream();
  checkpoint::LoadedCheckpoint loaded = manager.load(dir, comm_);
  const std::string what = "Engine::load_state('" + loaded.dir.string() + "')";

  LoadReport report;
  report.dir = loaded.dir;
  report.warnings = std::move(warnings);
  if (next_iteration) {
    manager.set_next_iteration(std::max(*next_iteration, manager.next_iteration()));
  }
  if (manager.config().automatic_checkpoint_naming) {
    const std::string warning = newer_checkpoints_warning(manager, comm_);
    if (!warning.empty()) report.warnings.push_back(warning);
  }
  for (std::string& w : world_size_warnings(loaded.manifest.world_size, comm_.size())) {
    report.warnings.push_back(std::move(w));
  }

  // A snapshot of the running state, applied again if anything fails on any rank: the
  // engine's own state, and each registered object (taken before any of them is restored;
  // `attempted` counts the objects whose load() ran, fully or not, and so must be put back).
  const CheckpointState before = capture_state(false);
  std::vector<checkpoint::CheckpointableSnapshot> snapshots;
  std::size_t attempted = 0;
  std::optional<std::string> error = checkpoint::capture_error([&] {
    assemble_optimizer(loaded);  // reads every rank file of a zero_stage 1 checkpoint
    check_registered_objects(loaded.custom_names, custom_);
    snapshots.reserve(custom_.size());
    for (const auto& [name, object] : custom_) snapshots.emplace_back(name, *object);
    apply_state(loaded.state, loaded.per_rank_missing, report.warnings);
    for (const auto& [name, object] : custom_) {
      ++attempted;
      loaded.restore(name, *object);
    }
  });
  try {
    checkpoint::agree_on_success(comm_, error, what);
  } catch (const std::exception& e) {
    std::vector<std::string> ignored;
    apply_state(before, false, ignored);
    // Every object is put back even if one refuses; a refusal is added to the error, every
    // rank's, so that all ranks throw the same message (every rank is here: the agreement
    // above threw on all of them).
    std::string mine;
    for (std::size_t i = 0; i < attempted; ++i) {
      const checkpoint::CheckpointableSnapshot& snapshot = snapshots.at(i);
      const std::optional<std::string> failed =
          checkpoint::capture_error([&] { snapshot.restore(*custom_.at(snapshot.name())); });
      if (failed) mine += "; rank " + std::to_string(comm_.rank()) + ": " + *failed;
    }
    std::string rollback_errors;
    for (const std::string& r : comm_.allgather_strings(mine)) rollback_errors += r;
    if (!rollback_errors.empty()) throw CheckpointError(std::string(e.what()) + rollback_errors);
    throw;
  }
  zero_all_gradients();
  if (is_main_process()) {
    for (const std::string& w : report.warnings) log("warning", what + ": " + w);
  }
  return report;
}

fs::path Engine::save_model(const fs::path& dir, checkpoint::ModelFormat format) {
  idle_stream();
  fs::path written;
  std::optional<std::string> error;
  if (is_main_process()) {
    error = checkpoint::capture_error([&] {
      fs::create_directories(dir);
      written = checkpoint::save_model(dir, nn::named_tensors(params_), format);
    });
  }
  checkpoint::agree_on_success(comm_, error, "Engine::save_model('" + dir.string() + "')");
  return fs::path(checkpoint::broadcast_string(comm_, written.string(), 0));
}

}  // namespace mpitrain
