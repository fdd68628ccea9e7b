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
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointError;
using checkpoint::CheckpointState;
using checkpoint::StateGroup;

// Returns an owning copy of `t` (copying a view would copy the view).
Tensor clone(const Tensor& t) {
  Tensor out(t.shape());
  std::copy_n(t.data(), t.numel(), out.data());
  return out;
}

// Returns the per-rank key prefix of a module's random stream at `path`.
std::string stream_key(const std::string& path) {
  return path.empty() ? std::string("model") : "model." + path;
}

// Returns `group` without its strings, as a StateDict.
StateDict to_state_dict_without_strings(StateGroup group) {
  group.strings.clear();
  return std::move(group).to_state_dict();
}

// Why the engine has (or lacks) each optional group, for error messages.
std::string_view reason_for(const std::string& group) {
  if (group == "optimizer") return "an optimizer passed to prepare()";
  if (group == "scheduler") return "a scheduler passed to prepare()";
  if (group == "scaler") return "mixed_precision fp16 (the loss scaler)";
  if (group == "data") return "a training loader passed to prepare()";
  return "the model";
}

std::int64_t integer_at(const StateGroup& g, const std::string& key, std::string_view group) {
  const auto it = g.integers.find(key);
  if (it == g.integers.end()) {
    throw CheckpointError("checkpoint group /" + std::string(group) + " has no integer '" + key + "'");
  }
  return it->second;
}

std::string string_at(const StateGroup& g, const std::string& key) {
  const auto it = g.strings.find(key);
  return it == g.strings.end() ? std::string() : it->second;
}

}  // namespace

// ---- state <-> CheckpointState ----------------------------------------------------------------

CheckpointState Engine::capture_state(bool views) const {
  CheckpointState st;
  StateGroup& model = st.replicated["model"];
  for (nn::Parameter* p : params_) {
    model.tensors[p->name] = views ? Tensor::view(p->value.span(), p->value.shape()) : clone(p->value);
  }
  if (optimizer_ != nullptr) {
    StateGroup g = StateGroup::from_state_dict(optimizer_->state_dict());
    g.strings["kind"] = optimizer_->kind();
    st.replicated["optimizer"] = std::move(g);
  }
  if (scheduler_ != nullptr) {
    StateGroup g = StateGroup::from_state_dict(scheduler_->state_dict());
    g.strings["kind"] = nn::to_string(scheduler_->kind());
    st.replicated["scheduler"] = std::move(g);
  }
  if (scaler_) {
    const LossScaler::State s = scaler_->state();
    StateGroup& g = st.replicated["scaler"];
    g.scalars["scale"] = s.scale;
    g.integers["growth_tracker"] = s.growth_tracker;
    g.integers["hysteresis"] = s.hysteresis;
    g.integers["skipped_steps"] = s.skipped_steps;
  }
  StateGroup& engine = st.replicated["engine"];
  engine.integers["step"] = static_cast<std::int64_t>(state_.step);
  // An open micro-step that already synchronised and stepped counts as done (saved from
  // inside the accumulate() guard, as a training loop body does).
  const bool open_done = micro_open_ && backward_in_micro_;
  engine.integers["micro_step"] = static_cast<std::int64_t>(state_.micro_step + (open_done ? 1 : 0));
  engine.integers["epoch"] = static_cast<std::int64_t>(state_.epoch);
  engine.integers["batches_in_epoch"] = static_cast<std::int64_t>(state_.batches_in_epoch);
  engine.integers["samples_seen"] = static_cast<std::int64_t>(state_.samples_seen);
  engine.integers["skipped_steps"] = static_cast<std::int64_t>(state_.skipped_steps);
  if (train_loader_ != nullptr) {
    const data::LoaderState ls = train_loader_->state();
    StateGroup& g = st.replicated["data"];
    g.integers["seed"] = static_cast<std::int64_t>(ls.seed);  // the bits of the uint64
    g.integers["epoch"] = ls.epoch;
    g.integers["position"] = ls.position;
    // What the position means: batches of global_batch_size examples, batches_per_epoch of
    // them per epoch over a data set of dataset_size examples.
    g.integers["global_batch_size"] =
        static_cast<std::int64_t>(train_loader_->sharding().global_batch_size());
    g.integers["batches_per_epoch"] = static_cast<std::int64_t>(train_loader_->batches_per_epoch());
    g.integers["dataset_size"] = static_cast<std::int64_t>(train_loader_->dataset().size());
  }
  st.config_yaml = config_text_;
  for (const auto& [name, object] : custom_) st.custom[name] = object;
  StateGroup& rng = st.per_rank["rng"];
  rng.integers["rank"] = comm_.rank();
  if (model_ != nullptr) {
    for (const auto& [path, stream] : model_->random_streams()) {
      for (const auto& [key, value] : stream->state_dict().scalars) {
        rng.scalars[stream_key(path) + "/" + key] = value;
      }
    }
  }
  st.step = static_cast<std::int64_t>(state_.step);
  st.epoch = static_cast<std::int64_t>(state_.epoch);
  return st;
}

void Engine::apply_state(const CheckpointState& loaded, bool per_rank_missing,
                         std::vector<std::string>& warnings) {
  const CheckpointState current = capture_state(true);

  // 1. Check everything before changing anything.
  std::set<std::string> names;
  for (const auto& [name, g] : loaded.replicated) names.insert(name);
  for (const auto& [name, g] : current.replicated) names.insert(name);
  for (const std::string& name : names) {
    const bool in_checkpoint = loaded.replicated.count(name) != 0;
    const bool in_engine = current.replicated.count(name) != 0;
    if (in_checkpoint && !in_engine) {
      throw CheckpointError("checkpoint group /" + name + " is saved, but this engine has no " +
                            std::string(reason_for(name)) + " to restore it into");
    }
    if (!in_checkpoint && in_engine) {
      throw CheckpointError("checkpoint has no group /" + name + ", but this engine has " +
                            std::string(reason_for(name)) + " whose state it would need");
    }
  }
  const auto group = [&](const CheckpointState& s, const std::string& name) -> const StateGroup& {
    return s.replicated.at(name);
  };
  checkpoint::check_same_structure(group(loaded, "model"), group(current, "model"),
                                   "checkpoint group /model");
  checkpoint::check_same_structure(group(loaded, "engine"), group(current, "engine"),
                                   "checkpoint group /engine");
  for (const char* name : {"optimizer", "scheduler"}) {
    if (current.replicated.count(name) == 0) continue;
    const std::string have = string_at(group(current, name), "kind");
    const std::string saved = string_at(group(loaded, name), "kind");
    if (saved != have) {
      throw CheckpointError("checkpoint group /" + std::string(name) + " holds a '" + saved +
                            "' state, but this run's " + name + " is '" + have + "'");
    }
  }
  if (current.replicated.count("data") != 0) {
    checkpoint::check_same_structure(group(loaded, "data"), group(current, "data"),
                                     "checkpoint group /data");
    const std::int64_t saved_n = integer_at(group(loaded, "data"), "dataset_size", "data");
    const std::int64_t have_n = integer_at(group(current, "data"), "dataset_size", "data");
    if (saved_n != have_n) {
      throw CheckpointError("checkpoint group /data: the checkpoint was saved over a training set of " +
                            std::to_string(saved_n) + " examples, this run's has " +
                            std::to_string(have_n));
    }
  }
  const StateGroup* saved_rng = nullptr;
  if (!per_rank_missing) {
    const auto it = loaded.per_rank.find("rng");
    if (it == loaded.per_rank.end()) {
      throw CheckpointError("rank file of rank " + std::to_string(comm_.rank()) + " has no group /rng");
    }
    saved_rng = &it->second;
    StateGroup expected = current.per_rank.at("rng");
    StateGroup saved = *saved_rng;
    expected.integers.erase("rank");
    saved.integers.erase("rank");
    checkpoint::check_same_structure(saved, expected,
                                     "rank file of rank " + std::to_string(comm_.rank()) +
                                         ", group /rng (the model's random streams)");
  }

  // 2. Apply. Anything thrown from here on is rolled back by the caller (load_state).
  for (nn::Parameter* p : params_) {
    const Tensor& t = group(loaded, "model").tensors.at(p->name);
    std::copy_n(t.data(), t.numel(), p->value.data());
  }
  if (optimizer_ != nullptr) {
    optimizer_->load_state_dict(to_state_dict_without_strings(group(loaded, "optimizer")));
  }
  if (scheduler_ != nullptr) {
    scheduler_->load_state_dict(to_state_dict_without_strings(group(loaded, "scheduler")));
  }
  if (scaler_) {
    const StateGroup& g = group(loaded, "scaler");
    const auto scale = g.scalars.find("scale");
    if (scale == g.scalars.end()) throw CheckpointError("checkpoint group /scaler has no scalar 'scale'");
    LossScaler::State s;
    s.scale = scale->second;
    s.growth_tracker = integer_at(g, "growth_tracker", "scaler");
    s.hysteresis = integer_at(g, "hysteresis", "scaler");
    s.skipped_steps = integer_at(g, "skipped_steps", "scaler");
    scaler_->load_state(s);
  }
  const StateGroup& eg = group(loaded, "engine");
  EngineState counters;
  counters.step = static_cast<std::uint64_t>(integer_at(eg, "step", "engine"));
  counters.micro_step = static_cast<std::uint64_t>(integer_at(eg, "micro_step", "engine"));
  counters.epoch = static_cast<std::uint64_t>(integer_at(eg, "epoch", "engine"));
  counters.batches_in_epoch = static_cast<std::uint64_t>(integer_at(eg, "batches_in_epoch", "engine"));
  counters.samples_seen = static_cast<std::uint64_t>(integer_at(eg, "samples_seen", "engine"));
  counters.skipped_steps = static_cast<std::uint64_t>(integer_at(eg, "skipped_steps", "engine"));
  if (train_loader_ != nullptr) {
    const StateGroup& g = group(loaded, "data");
    data::LoaderState ls;
    ls.seed = static_cast<std::uint64_t>(integer_at(g, "seed", "data"));
    ls.epoch = integer_at(g, "epoch", "data");
    ls.position = integer_at(g, "position", "data");
    const std::int64_t saved_global = integer_at(g, "global_batch_size", "data");
    const std::int64_t saved_batches = integer_at(g, "batches_per_epoch", "data");
    const auto global = static_cast<std::int64_t>(train_loader_->sharding().global_batch_size());
    const auto batches = static_cast<std::int64_t>(train_loader_->batches_per_epoch());
    if (saved_global != global || saved_batches != batches) {
      // The epoch's order is the same for every world size (accelerate sharding: global
      // batch g is positions [g*G, (g+1)*G) of it), so the examples already read map to a
      // position in this run's batches; a position that falls inside a batch rounds down
      // and those examples are read again.
      const std::int64_t seen = ls.position * saved_global;
      const std::int64_t position =
          ls.position >= saved_batches ? batches : std::min(batches, seen / global);
      if (ls.position > 0) {
        warnings.push_back("the global batch changed from " + std::to_string(saved_global) +
                           " to " + std::to_string(global) + " examples per step: epoch " +
                           std::to_string(ls.epoch) + " resumes at batch " +
                           std::to_string(position) + " (example " +
                           std::to_string(std::min(seen, position * global)) + " of the epoch's order; " +
                           std::to_string(seen) + " examples had been read)");
      }
      ls.position = position;
    }
    train_loader_->load_state(ls);
    counters.epoch = static_cast<std::uint64_t>(std::max<std::int64_t>(0, ls.epoch));
    counters.batches_in_epoch = static_cast<std::uint64_t>(ls.position);
  }
  if (saved_rng != nullptr && model_ != nullptr) {
    for (const auto& [path, stream] : model_->random_streams()) {
      const std::string prefix = stream_key(path) + "/";
      StateDict d;
      for (const auto& [key, value] : saved_rng->scalars) {
        if (key.compare(0, prefix.size(), prefix) == 0) d.scalars[key.substr(prefix.size())] = value;
      }
      stream->load_state_dict(d);
    }
  }
  state_ = counters;
  window_pos_ = 0;
  step_pending_ = false;
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
  // Inside a micro-step that synchronised and already stepped, the state is that of the
  // step boundary (capture_state counts the open micro-step as done).
  const bool stepped_in_open_micro = micro_open_ && backward_in_micro_ && sync_gradients_;
  const bool at_boundary = micro_open_ ? stepped_in_open_micro && !step_pending_
                                       : window_pos_ == 0 && !step_pending_;
  if (at_boundary) return;
  const std::size_t accumulated = window_pos_ + (micro_open_ && backward_in_micro_ ? 1 : 0);
  throw std::logic_error(std::string(who) + " (rank " + std::to_string(comm_.rank()) +
                         "): called inside an accumulation window (" +
                         std::to_string(accumulated) + " micro-step(s) of gradients accumulated" +
                         (step_pending_ ? ", step() not called yet" : "") +
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
  std::string chosen;
  std::optional<std::string> error;
  if (comm_.rank() == 0) {
    const std::optional<fs::path> latest = manager.latest();
    if (latest) {
      chosen = latest->string();
    } else {
      error = "no committed checkpoint in '" + manager.checkpoints_dir().string() + "'";
    }
  }
  checkpoint::agree_on_success(comm_, error, "Engine::load_state");
  // Rank 0 decides, so every rank loads the same folder even if a listing races a save.
  return load_state(fs::path(checkpoint::broadcast_string(comm_, chosen, 0)));
}

Engine::LoadReport Engine::load_state(const fs::path& dir) {
  if (micro_open_) {
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
  // Loading checkpoint_<k> makes the next automatic save checkpoint_<k + 1>; saving never
  // overwrites, so newer checkpoints would make that save fail much later. Said now. Rank 0
  // lists and every rank gets its words (advice only: a listing that fails says nothing).
  if (manager.config().automatic_checkpoint_naming) {
    std::string warning;
    if (comm_.rank() == 0) {
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
    warning = checkpoint::broadcast_string(comm_, warning, 0);
    if (!warning.empty()) report.warnings.push_back(warning);
  }
  const int saved_world = loaded.manifest.world_size;
  if (saved_world != comm_.size()) {
    report.warnings.push_back("the checkpoint was saved by " + std::to_string(saved_world) +
                              " ranks and is loaded by " + std::to_string(comm_.size()));
    if (comm_.size() > saved_world) {
      const std::string which = comm_.size() - saved_world == 1
                                    ? "rank " + std::to_string(saved_world) + " has"
                                    : "ranks " + std::to_string(saved_world) + ".." +
                                          std::to_string(comm_.size() - 1) + " have";
      report.warnings.push_back(which +
                                " no rank file: the random streams this program derived from "
                                "the seed and the rank are kept");
    }
  }

  // A snapshot of the running state, applied again if anything fails on any rank: the
  // engine's own state, and each registered object (taken before any of them is restored;
  // `attempted` counts the objects whose load() ran, fully or not, and so must be put back).
  const CheckpointState before = capture_state(false);
  std::vector<checkpoint::CheckpointableSnapshot> snapshots;
  std::size_t attempted = 0;
  std::optional<std::string> error = checkpoint::capture_error([&] {
    std::vector<std::string> registered;
    for (const auto& [name, object] : custom_) registered.push_back(name);
    if (registered != loaded.custom_names) {
      std::string saved_list, have_list;
      for (const std::string& n : loaded.custom_names) saved_list += (saved_list.empty() ? "" : ", ") + n;
      for (const std::string& n : registered) have_list += (have_list.empty() ? "" : ", ") + n;
      throw CheckpointError("the checkpoint's registered objects (/custom: " +
                            (saved_list.empty() ? std::string("none") : saved_list) +
                            ") differ from this engine's (" +
                            (have_list.empty() ? std::string("none") : have_list) + ")");
    }
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
    for (const std::string& w : report.warnings) {
      std::fprintf(stderr, "mpitrain: warning: %s: %s\n", what.c_str(), w.c_str());
    }
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
