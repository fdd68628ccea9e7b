// The sharded optimizer state (zero_stage 1) in checkpoints and as a whole: assembling a
// checkpoint's pieces from every rank file (resharding on load: any saved world size and
// stage loads on any world size and stage), cutting a whole state into this rank's pieces,
// and putting every rank's pieces together (Engine::optimizer_state_dict).
//
// Cost: assembling reads every rank file (the whole optimizer state, S values) and builds
// the whole state in memory on every rank (S values each, for the duration of the load);
// cutting copies this rank's S / n values; optimizer_state_dict allreduces S values.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

using checkpoint::CheckpointError;
using checkpoint::StateGroup;

constexpr std::string_view kBegin = "/begin";

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Returns the hyper-parameters of a state dict's scalars (the keys without '/').
std::map<std::string, double> hyper_parameters(const std::map<std::string, double>& scalars) {
  std::map<std::string, double> out;
  for (const auto& [key, value] : scalars) {
    if (key.find('/') == std::string::npos) out[key] = value;
  }
  return out;
}

// Adds one rank file's pieces (group /optimizer of rank_<rank>.h5) to `whole`, whose slot
// tensors take the shapes of `params` (name -> parameter); counts each parameter's values
// covered in `covered`.
void add_pieces(const StateGroup& pieces, int rank, const std::map<std::string, const nn::Parameter*>& params,
                StateGroup& whole, std::map<std::string, std::size_t>& covered) {
  const std::string where = "rank_" + std::to_string(rank) + ".h5 /optimizer";
  for (const auto& [key, begin_value] : pieces.integers) {
    if (!ends_with(key, kBegin)) continue;
    const std::string name = key.substr(0, key.size() - kBegin.size());
    const auto p = params.find(name);
    if (p == params.end()) {
      throw CheckpointError(where + " holds a piece of parameter '" + name + "', which this engine's optimizer does not have");
    }
    const auto step = pieces.scalars.find(name + "/step");
    if (step == pieces.scalars.end()) throw CheckpointError(where + " has no step of '" + name + "'");
    const auto known = whole.scalars.emplace(name + "/step", step->second);
    if (!known.second && known.first->second != step->second) {
      throw CheckpointError(where + ": the pieces of '" + name + "' were saved at different steps");
    }
    const auto begin = static_cast<std::size_t>(std::max<std::int64_t>(0, begin_value));
    const std::size_t numel = p->second->value.numel();
    std::size_t length = 0;
    const std::string prefix = name + "/";
    for (auto t = pieces.tensors.lower_bound(prefix); t != pieces.tensors.end() && t->first.compare(0, prefix.size(), prefix) == 0; ++t) {
      length = t->second.numel();
      if (begin + length > numel) {
        throw CheckpointError(where + ": piece " + t->first + " covers values [" + std::to_string(begin) + ", " +
                              std::to_string(begin + length) + ") of a parameter of " + std::to_string(numel));
      }
      auto [slot, fresh] = whole.tensors.try_emplace(t->first, p->second->value.shape());
      std::copy_n(t->second.data(), length, slot->second.data() + begin);
    }
    covered[name] += length;
  }
}

}  // namespace

void Engine::assemble_optimizer(checkpoint::LoadedCheckpoint& loaded) const {
  const auto it = loaded.state.replicated.find("optimizer");
  const bool sharded_here = shard_optimizer_ != nullptr;
  if (it != loaded.state.replicated.end() && loaded.manifest.zero_stage == 1 && optimizer_ != nullptr) {
    std::map<std::string, const nn::Parameter*> params;
    for (const nn::Parameter* p : optimizer_->parameters()) params[p->name] = p;
    StateGroup whole;
    whole.strings = it->second.strings;
    whole.scalars = hyper_parameters(it->second.scalars);
    std::map<std::string, std::size_t> covered;
    for (int r = 0; r < loaded.manifest.world_size; ++r) {
      const bool mine = r == comm_.rank() && !loaded.per_rank_missing;
      const std::map<std::string, StateGroup> file = mine ? loaded.state.per_rank : loaded.rank_file(r);
      const auto pieces = file.find("optimizer");
      if (pieces == file.end()) throw CheckpointError("rank_" + std::to_string(r) + ".h5 has no group /optimizer");
      add_pieces(pieces->second, r, params, whole, covered);
    }
    for (const auto& [name, count] : covered) {
      const std::size_t numel = params.at(name)->value.numel();
      const bool has_slots = whole.scalars.at(name + "/step") > 0;
      if (has_slots && count != numel) {
        throw CheckpointError("the rank files hold " + std::to_string(count) + " optimizer values of '" + name +
                              "', which has " + std::to_string(numel));
      }
    }
    it->second = std::move(whole);
  }
  // The replicated group now holds everything: this rank's own group has nothing to add.
  if (sharded_here && !loaded.per_rank_missing) {
    loaded.state.per_rank["optimizer"] = StateGroup();
  } else {
    loaded.state.per_rank.erase("optimizer");
  }
}

void Engine::load_shard_from_whole(const StateDict& whole) {
  StateDict shard;
  shard.scalars = hyper_parameters(whole.scalars);
  for (std::size_t i = 0; i < shard_params_.size(); ++i) {
    const std::string& name = shard_params_[i]->name;
    const std::size_t begin = shard_begin_[i];
    const std::size_t length = shard_params_[i]->value.numel();
    const auto step = whole.scalars.find(name + "/step");
    if (step == whole.scalars.end()) throw CheckpointError("checkpoint group /optimizer has no step of '" + name + "'");
    shard.scalars[step->first] = step->second;
    const std::string prefix = name + "/";
    for (auto t = whole.tensors.lower_bound(prefix); t != whole.tensors.end() && t->first.compare(0, prefix.size(), prefix) == 0; ++t) {
      if (t->second.numel() < begin + length) {
        throw CheckpointError("checkpoint group /optimizer: " + t->first + " holds " + std::to_string(t->second.numel()) +
                              " values, fewer than the parameter's");
      }
      Tensor piece(Shape{length});
      std::copy_n(t->second.data() + begin, length, piece.data());
      shard.tensors.emplace(t->first, std::move(piece));
    }
  }
  shard_optimizer_->load_state_dict(shard);  // all-or-nothing; checks every key
  optimizer_->set_lr(shard.scalars.at("lr"));
}

StateDict Engine::optimizer_state_dict() const {
  if (optimizer_ == nullptr) throw std::logic_error("Engine::optimizer_state_dict: no optimizer");
  if (!shard_optimizer_) return optimizer_->state_dict();
  const StateDict shard = shard_optimizer_->state_dict();
  StateDict whole;
  whole.scalars = hyper_parameters(shard.scalars);
  whole.scalars["lr"] = optimizer_->lr();
  // Every rank's slot names, and each parameter's step (pieces of one parameter step together).
  std::string slots;
  for (const auto& [key, t] : shard.tensors) slots += key.substr(key.rfind('/')) + "\n";
  std::set<std::string> slot_names;
  idle_stream();
  for (const std::string& list : comm_.allgather_strings(slots)) {
    for (std::size_t at = 0, end; (end = list.find('\n', at)) != std::string::npos; at = end + 1) {
      slot_names.insert(list.substr(at, end - at));
    }
  }
  const std::vector<nn::Parameter*>& params = optimizer_->parameters();
  std::vector<double> steps(params.size(), 0.0);
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto s = shard.scalars.find(params[k]->name + "/step");
    if (s != shard.scalars.end()) steps[k] = s->second;
  }
  comm_.allreduce(std::span<double>(steps), ReduceOp::max);
  // The slots as bits: each value comes from exactly one rank, zeros from the others, so an
  // integer sum rebuilds it exactly (-0.0 included).
  std::vector<std::int32_t> bits;
  std::map<std::string, std::size_t> at;
  for (std::size_t k = 0; k < params.size(); ++k) {
    whole.scalars[params[k]->name + "/step"] = steps[k];
    if (steps[k] <= 0) continue;
    for (const std::string& slot : slot_names) {
      at[params[k]->name + slot] = bits.size();
      bits.resize(bits.size() + params[k]->value.numel(), 0);
    }
  }
  for (std::size_t i = 0; i < shard_params_.size(); ++i) {
    for (const std::string& slot : slot_names) {
      const auto t = shard.tensors.find(shard_params_[i]->name + slot);
      if (t == shard.tensors.end()) continue;
      std::memcpy(bits.data() + at.at(t->first) + shard_begin_[i], t->second.data(), t->second.numel() * sizeof(float));
    }
  }
  comm_.allreduce(std::span<std::int32_t>(bits), ReduceOp::sum);
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (steps[k] <= 0) continue;
    for (const std::string& slot : slot_names) {
      Tensor t(params[k]->value.shape());
      std::memcpy(t.data(), bits.data() + at.at(params[k]->name + slot), t.numel() * sizeof(float));
      whole.tensors.emplace(params[k]->name + slot, std::move(t));
    }
  }
  return whole;
}

}  // namespace mpitrain
