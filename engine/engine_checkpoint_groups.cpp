// The checkpoint groups the Engine owns, declared once: the table at the end of this file
// lists each group's name, scope, what the engine needs to have it, and how it is
// captured, checked and applied (EngineCheckpointGroup). capture_state, apply_state and
// their error messages all read the table, so a new piece of engine state is one function
// set here and one line in the table. What each group holds is DESIGN.md section 5.

#include <algorithm>
#include <string>
#include <utility>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/engine/detail/checkpoint_group.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

using checkpoint::CheckpointError;
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

std::int64_t integer_at(const StateGroup& g, const std::string& key, std::string_view group) {
  const auto it = g.integers.find(key);
  if (it == g.integers.end()) {
    throw CheckpointError("checkpoint group /" + std::string(group) + " has no integer '" + key + "'");
  }
  return it->second;
}

std::uint64_t counter_at(const StateGroup& g, const std::string& key) {
  return static_cast<std::uint64_t>(integer_at(g, key, "engine"));
}

std::string string_at(const StateGroup& g, const std::string& key) {
  const auto it = g.strings.find(key);
  return it == g.strings.end() ? std::string() : it->second;
}

void check_structure(const StateGroup& saved, const StateGroup& current, std::string_view name) {
  checkpoint::check_same_structure(saved, current, "checkpoint group /" + std::string(name));
}

// Throws unless `saved` holds the state of the same kind of object (its "kind" string).
void check_kind(const StateGroup& saved, const StateGroup& current, std::string_view name) {
  const std::string have = string_at(current, "kind");
  const std::string was = string_at(saved, "kind");
  if (was != have) {
    throw CheckpointError("checkpoint group /" + std::string(name) + " holds a '" + was +
                          "' state, but this run's " + std::string(name) + " is '" + have + "'");
  }
}

void check_nothing(const Engine&, const StateGroup&, const StateGroup&) {}

// Returns the loader position of this run for a checkpoint position `saved` of batches of
// `saved_global` examples (`saved_batches` per epoch). The epoch's order is the same for
// every world size (accelerate sharding: global batch g is positions [g*G, (g+1)*G) of it),
// so the examples already read map to a position in this run's batches; a position that
// falls inside a batch rounds down and those examples are read again.
std::int64_t convert_position(std::int64_t saved, std::int64_t saved_global,
                              std::int64_t saved_batches, std::int64_t global, std::int64_t batches) {
  return saved >= saved_batches ? batches : std::min(batches, saved * saved_global / global);
}

}  // namespace

// The functions of the table: nested in Engine, so they reach its members.
struct Engine::CheckpointGroups {
  // /model: every parameter, fp32, torch names and shapes.
  static StateGroup capture_model(const Engine& e, bool views) {
    StateGroup g;
    for (nn::Parameter* p : e.params_) {
      g.tensors[p->name] = views ? Tensor::view(p->value.span(), p->value.shape()) : clone(p->value);
    }
    return g;
  }
  static void check_model(const Engine&, const StateGroup& saved, const StateGroup& current) {
    check_structure(saved, current, "model");
  }
  static void apply_model(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    for (nn::Parameter* p : e.params_) {
      const Tensor& t = saved.tensors.at(p->name);
      std::copy_n(t.data(), t.numel(), p->value.data());
    }
  }

  // /buffers: the registered buffers (bring your own model), fp32 tensors and int64 values.
  static bool has_buffers(const Engine& e) { return !e.buffers_.empty(); }
  static StateGroup capture_buffers(const Engine& e, bool views) {
    StateGroup g;
    for (const ExternalBuffer& b : e.buffers_) {
      if (!b.integers.empty()) {
        g.integers[b.name] = b.integers[0];
        continue;
      }
      const Tensor view = Tensor::view(b.value, b.shape);
      g.tensors[b.name] = views ? view : clone(view);
    }
    return g;
  }
  static void check_buffers(const Engine&, const StateGroup& saved, const StateGroup& current) {
    check_structure(saved, current, "buffers");
  }
  static void apply_buffers(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    for (const ExternalBuffer& b : e.buffers_) {
      if (!b.integers.empty()) {
        b.integers[0] = integer_at(saved, b.name, "buffers");
        continue;
      }
      const Tensor& t = saved.tensors.at(b.name);
      std::copy_n(t.data(), t.numel(), b.value.data());
    }
  }

  // /engine: the counters of EngineState.
  static StateGroup capture_engine(const Engine& e, bool) {
    StateGroup g;
    g.integers["step"] = static_cast<std::int64_t>(e.state_.step);
    // An open micro-step that already synchronised and stepped counts as done (saved from
    // inside the accumulate() guard, as a training loop body does).
    const std::uint64_t open_done = e.phase_.open_micro_step_done() ? 1 : 0;
    g.integers["micro_step"] = static_cast<std::int64_t>(e.state_.micro_step + open_done);
    g.integers["epoch"] = static_cast<std::int64_t>(e.state_.epoch);
    g.integers["batches_in_epoch"] = static_cast<std::int64_t>(e.state_.batches_in_epoch);
    g.integers["samples_seen"] = static_cast<std::int64_t>(e.state_.samples_seen);
    g.integers["skipped_steps"] = static_cast<std::int64_t>(e.state_.skipped_steps);
    return g;
  }
  static void check_engine(const Engine&, const StateGroup& saved, const StateGroup& current) {
    check_structure(saved, current, "engine");
  }
  static void apply_engine(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    EngineState s;
    s.step = counter_at(saved, "step");
    s.micro_step = counter_at(saved, "micro_step");
    s.epoch = counter_at(saved, "epoch");
    s.batches_in_epoch = counter_at(saved, "batches_in_epoch");
    s.samples_seen = counter_at(saved, "samples_seen");
    s.skipped_steps = counter_at(saved, "skipped_steps");
    e.state_ = s;  // /data, applied next, sets epoch and batches_in_epoch from the loader
  }

  // /optimizer: its state dict (slots, step counts, hyper-parameters) and its kind. At
  // zero_stage 1 only the kind, the hyper-parameters and integers zero_stage (1) and shards
  // (the world size): the slots and step counts are in the rank files (/optimizer below).
  static bool has_optimizer(const Engine& e) { return e.optimizer_ != nullptr; }
  static StateGroup capture_optimizer(const Engine& e, bool) {
    StateGroup g;
    if (e.shard_optimizer_) {
      for (const auto& [key, value] : e.shard_optimizer_->state_dict().scalars) {
        if (key.find('/') == std::string::npos) g.scalars[key] = value;
      }
      g.scalars["lr"] = e.optimizer_->lr();  // the scheduler sets it here after each step
      g.integers["zero_stage"] = 1;
      g.integers["shards"] = e.comm_.size();
    } else {
      g = StateGroup::from_state_dict(e.optimizer_->state_dict());
    }
    g.strings["kind"] = e.optimizer_->kind();
    return g;
  }
  static void check_optimizer(const Engine&, const StateGroup& saved, const StateGroup& current) {
    check_kind(saved, current, "optimizer");
  }
  static void apply_optimizer(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    if (saved.integers.count("zero_stage") != 0) {
      // Only a snapshot of this sharded engine is still in this form (load_state assembles
      // checkpoints): its pieces come back with the per-rank group.
      if (!e.shard_optimizer_) throw CheckpointError("checkpoint group /optimizer holds no slots");
      return;
    }
    if (e.shard_optimizer_) {
      e.load_shard_from_whole(to_state_dict_without_strings(saved));
    } else {
      e.optimizer_->load_state_dict(to_state_dict_without_strings(saved));
    }
  }

  // /optimizer of each rank file at zero_stage 1: the state dict of this rank's pieces
  // (1-D slot tensors "<name>/<slot>", scalars "<name>/step" and the hyper-parameters) and
  // integer "<name>/begin", the piece's first value in the flattened parameter.
  static bool has_shard(const Engine& e) { return e.shard_optimizer_ != nullptr; }
  static StateGroup capture_shard(const Engine& e, bool) {
    StateGroup g = StateGroup::from_state_dict(e.shard_optimizer_->state_dict());
    g.scalars["lr"] = e.optimizer_->lr();
    for (std::size_t i = 0; i < e.shard_params_.size(); ++i) {
      g.integers[e.shard_params_[i]->name + "/begin"] = static_cast<std::int64_t>(e.shard_begin_[i]);
    }
    return g;
  }
  static void apply_shard(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    if (saved.tensors.empty() && saved.scalars.empty()) return;  // assembled into /optimizer
    StateGroup shard = saved;
    shard.integers.clear();
    const StateDict d = to_state_dict_without_strings(std::move(shard));
    e.shard_optimizer_->load_state_dict(d);
    e.optimizer_->set_lr(d.scalars.at("lr"));
  }

  // /scheduler: the scheduler prepare() got, its state dict and its kind.
  static bool has_scheduler(const Engine& e) { return e.scheduler_ != nullptr; }
  static StateGroup capture_scheduler(const Engine& e, bool) {
    StateGroup g = StateGroup::from_state_dict(e.scheduler_->state_dict());
    g.strings["kind"] = nn::to_string(e.scheduler_->kind());
    return g;
  }
  static void check_scheduler(const Engine&, const StateGroup& saved, const StateGroup& current) {
    check_kind(saved, current, "scheduler");
  }
  static void apply_scheduler(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    e.scheduler_->load_state_dict(to_state_dict_without_strings(saved));
  }

  // /scaler: the fp16 loss scaler's LossScaler::State.
  static bool has_scaler(const Engine& e) { return e.scaler_.has_value(); }
  static StateGroup capture_scaler(const Engine& e, bool) {
    const LossScaler::State s = e.scaler_->state();
    StateGroup g;
    g.scalars["scale"] = s.scale;
    g.integers["growth_tracker"] = s.growth_tracker;
    g.integers["hysteresis"] = s.hysteresis;
    g.integers["skipped_steps"] = s.skipped_steps;
    return g;
  }
  static void apply_scaler(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    const auto scale = saved.scalars.find("scale");
    if (scale == saved.scalars.end()) throw CheckpointError("checkpoint group /scaler has no scalar 'scale'");
    LossScaler::State s;
    s.scale = scale->second;
    s.growth_tracker = integer_at(saved, "growth_tracker", "scaler");
    s.hysteresis = integer_at(saved, "hysteresis", "scaler");
    s.skipped_steps = integer_at(saved, "skipped_steps", "scaler");
    e.scaler_->load_state(s);
  }

  // /data: the training loader's position (data::LoaderState) and what it means: batches
  // of global_batch_size examples, batches_per_epoch of them per epoch over a data set of
  // dataset_size examples.
  static bool has_data(const Engine& e) { return e.train_loader_ != nullptr; }
  static StateGroup capture_data(const Engine& e, bool) {
    const data::DataLoader& loader = *e.train_loader_;
    const data::LoaderState ls = loader.state();
    StateGroup g;
    g.integers["seed"] = static_cast<std::int64_t>(ls.seed);  // the bits of the uint64
    g.integers["epoch"] = ls.epoch;
    g.integers["position"] = ls.position;
    g.integers["global_batch_size"] = static_cast<std::int64_t>(loader.sharding().global_batch_size());
    g.integers["batches_per_epoch"] = static_cast<std::int64_t>(loader.batches_per_epoch());
    g.integers["dataset_size"] = static_cast<std::int64_t>(loader.dataset().size());
    return g;
  }
  static void check_data(const Engine&, const StateGroup& saved, const StateGroup& current) {
    check_structure(saved, current, "data");
    const std::int64_t saved_n = integer_at(saved, "dataset_size", "data");
    const std::int64_t have_n = integer_at(current, "dataset_size", "data");
    if (saved_n != have_n) {
      throw CheckpointError("checkpoint group /data: the checkpoint was saved over a training set of " +
                            std::to_string(saved_n) + " examples, this run's has " +
                            std::to_string(have_n));
    }
  }
  static void apply_data(Engine& e, const StateGroup& saved, std::vector<std::string>& warnings) {
    data::LoaderState ls;
    ls.seed = static_cast<std::uint64_t>(integer_at(saved, "seed", "data"));
    ls.epoch = integer_at(saved, "epoch", "data");
    ls.position = integer_at(saved, "position", "data");
    const std::int64_t saved_global = integer_at(saved, "global_batch_size", "data");
    const std::int64_t saved_batches = integer_at(saved, "batches_per_epoch", "data");
    const auto global = static_cast<std::int64_t>(e.train_loader_->sharding().global_batch_size());
    const auto batches = static_cast<std::int64_t>(e.train_loader_->batches_per_epoch());
    if (saved_global != global || saved_batches != batches) {
      const std::int64_t seen = ls.position * saved_global;
      const std::int64_t position = convert_position(ls.position, saved_global, saved_batches, global, batches);
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
    e.train_loader_->load_state(ls);
    e.state_.epoch = static_cast<std::uint64_t>(std::max<std::int64_t>(0, ls.epoch));
    e.state_.batches_in_epoch = static_cast<std::uint64_t>(ls.position);
  }

  // /rng of each rank file: the rank, and the state of each of the model's random streams
  // (dropout) under "model[.<path>]/<key>".
  static StateGroup capture_rng(const Engine& e, bool) {
    StateGroup g;
    g.integers["rank"] = e.comm_.rank();
    if (e.model_ == nullptr) return g;
    for (const auto& [path, stream] : e.model_->random_streams()) {
      for (const auto& [key, value] : stream->state_dict().scalars) {
        g.scalars[stream_key(path) + "/" + key] = value;
      }
    }
    return g;
  }
  static void check_rng(const Engine& e, const StateGroup& saved, const StateGroup& current) {
    StateGroup expected = current;
    StateGroup was = saved;
    expected.integers.erase("rank");
    was.integers.erase("rank");
    checkpoint::check_same_structure(was, expected,
                                     "rank file of rank " + std::to_string(e.comm_.rank()) +
                                         ", group /rng (the model's random streams)");
  }
  static void apply_rng(Engine& e, const StateGroup& saved, std::vector<std::string>&) {
    if (e.model_ == nullptr) return;
    for (const auto& [path, stream] : e.model_->random_streams()) {
      const std::string prefix = stream_key(path) + "/";
      StateDict d;
      for (const auto& [key, value] : saved.scalars) {
        if (key.compare(0, prefix.size(), prefix) == 0) d.scalars[key.substr(prefix.size())] = value;
      }
      stream->load_state_dict(d);
    }
  }

  static bool always(const Engine&) { return true; }
};

std::span<const EngineCheckpointGroup> Engine::checkpoint_groups() {
  using G = CheckpointGroups;
  using Scope = EngineCheckpointGroup::Scope;
  // Checked and applied in this order: /engine before /data, which sets the epoch and the
  // batches of the epoch from the loader it restored.
  static constexpr EngineCheckpointGroup kGroups[] = {
      {"model", Scope::replicated, "the model", G::always, G::capture_model, G::check_model,
       G::apply_model},
      {"buffers", Scope::replicated, "model buffers (register_buffers)", G::has_buffers,
       G::capture_buffers, G::check_buffers, G::apply_buffers},
      {"engine", Scope::replicated, "the engine counters", G::always, G::capture_engine,
       G::check_engine, G::apply_engine},
      {"optimizer", Scope::replicated, "an optimizer passed to prepare()", G::has_optimizer,
       G::capture_optimizer, G::check_optimizer, G::apply_optimizer},
      {"scheduler", Scope::replicated, "a scheduler passed to prepare()", G::has_scheduler,
       G::capture_scheduler, G::check_scheduler, G::apply_scheduler},
      {"scaler", Scope::replicated, "mixed_precision fp16 (the loss scaler)", G::has_scaler,
       G::capture_scaler, check_nothing, G::apply_scaler},
      {"data", Scope::replicated, "a training loader passed to prepare()", G::has_data,
       G::capture_data, G::check_data, G::apply_data},
      {"rng", Scope::per_rank, "the model's random streams", G::always, G::capture_rng,
       G::check_rng, G::apply_rng},
      {"optimizer", Scope::per_rank, "distributed.zero_stage 1", G::has_shard, G::capture_shard,
       check_nothing, G::apply_shard},
  };
  return kGroups;
}

}  // namespace mpitrain
