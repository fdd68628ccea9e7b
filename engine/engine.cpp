// Engine: cost per optimizer step on n ranks with P parameter values and k micro-steps:
// k backward passes of the model (the loss gradient multiplied once per micro-step, O(batch
// x outputs)); on the synchronising one the bucket reductions of GradientSync (2 (n-1)/n * P
// values per rank on the wire with the ring, overlapped with backward); one pass over P
// values for the inf/NaN check, fused with the fp16 unscale and with clipping when
// clip_grad_norm is called (plus one read pass for the norm); then the optimizer.
// prepare(): one allgather of three 64-bit values per rank (an error flag, hashes of the
// settings and of the parameter list) and one broadcast per parameter; an error or a
// mismatch adds one allgather and one allgatherv of the texts that name it.

#include "mpitrain/engine/engine.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

#include "mpitrain/data/batch_sharding.hpp"
#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/precision/all_finite.hpp"

namespace mpitrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Returns the FNV-1a 64-bit hash of `text` (a fingerprint, not a security measure).
std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// One line per parameter, "name\tshape", in order.
std::string describe(const std::vector<nn::Parameter*>& params) {
  std::string out;
  for (const nn::Parameter* p : params) {
    out += p->name;
    out += '\t';
    out += mpitrain::to_string(p->value.shape());
    out += '\n';
  }
  return out;
}

// "key\tvalue" lines of the settings every rank must share.
std::string describe_settings(const EngineConfig& config) {
  std::string out;
  for (const auto& [key, value] : config.cross_rank_settings()) out += key + '\t' + value + '\n';
  return out;
}

// Returns the loader options `loader` has once prepare_loader() shards it over `world`
// ranks for `rank` with the engine's split_batches and even_batches.
data::DataLoaderOptions sharded_options(const data::DataLoader& loader, std::size_t world,
                                        std::size_t rank, const EngineConfig& config) {
  data::DataLoaderOptions o = loader.options();
  o.world_size = world;
  o.rank = rank;
  o.split_batches = config.split_batches;
  o.even_batches = config.even_batches;
  return o;
}

// Returns true when prepare_loader() keeps `loader` as it is (already sharded this way).
bool already_sharded(const data::DataLoader& loader, const data::DataLoaderOptions& target) {
  const data::DataLoaderOptions& have = loader.options();
  return have.world_size == target.world_size && have.rank == target.rank &&
         have.split_batches == target.split_batches && have.even_batches == target.even_batches;
}

// Returns why `loader`, sharded as `target`, cannot be a training loader, or "" when it can:
// the sharding is invalid (DataLoader's own checks), or ranks would read different numbers
// of batches, so that their gradient synchronisations would not pair up.
std::string training_loader_error(const data::DataLoader& loader,
                                  const data::DataLoaderOptions& target) {
  try {
    const data::BatchSharding sharding(data::sharding_options(loader.dataset().size(), target));
    for (std::size_t r = 0; r < target.world_size; ++r) {
      if (sharding.num_batches(r) == sharding.num_batches(0)) continue;
      return "the training loader with even_batches=false: rank " + std::to_string(r) +
             " reads " + std::to_string(sharding.num_batches(r)) +
             " batches per epoch and rank 0 " + std::to_string(sharding.num_batches(0)) +
             "; their gradient synchronisations would not pair up. Use even_batches=true (or "
             "drop_last) for training; uneven loaders are for evaluation";
    }
  } catch (const std::invalid_argument& e) {
    return std::string("the training loader: ") + e.what();
  }
  return "";
}

// "key\tvalue" lines of a training loader as prepare_loader() leaves it: what decides how
// many batches each rank reads (so how many synchronisations an epoch has), which ones
// (shuffle, seed) and from where (epoch, position; a rebuilt loader starts its epoch over).
// The engine's data.split_batches and data.even_batches are in cross_rank_settings().
std::string describe_loader(const data::DataLoader& loader, const data::DataLoaderOptions& target) {
  const data::DataLoaderOptions& o = target;
  const std::size_t position = already_sharded(loader, target) ? loader.position() : 0;
  std::string out = "data.dataset_size\t" + std::to_string(loader.dataset().size()) + '\n';
  out += "data.batch_size\t" + std::to_string(o.batch_size) + '\n';
  out += std::string("data.drop_last\t") + (o.drop_last ? "true" : "false") + '\n';
  out += std::string("data.shuffle\t") + (o.shuffle ? "true" : "false") + '\n';
  if (o.shuffle) out += "data.seed\t" + std::to_string(o.seed) + '\n';
  out += std::string("data.mode\t") +
         (o.mode == data::ShardingMode::accelerate ? "accelerate" : "distributed_sampler") + '\n';
  out += "data.epoch\t" + std::to_string(loader.epoch()) + '\n';
  out += "data.position\t" + std::to_string(position) + '\n';
  return out;
}

// Returns why ranks whose `key` differs cannot work together (the end of the message).
std::string why_equal(std::string_view key) {
  if (key.starts_with("data.")) {
    return " (they decide how many batches each rank reads, so how many gradient "
           "synchronisations an epoch has, and which examples; they must be equal on every rank)";
  }
  if (key.starts_with("project.")) {
    return " (it decides which collectives save_state() and load_state() run, so it must be "
           "equal on every rank)";
  }
  return " (they decide the gradient buckets and the collectives, so they must be equal on "
         "every rank)";
}

struct ParamLine {
  std::string name;
  std::string shape;
};

std::vector<ParamLine> parse_description(std::string_view text) {
  std::vector<ParamLine> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    const std::size_t tab = line.find('\t');
    lines.push_back({std::string(line.substr(0, tab)),
                     tab == std::string_view::npos ? std::string() : std::string(line.substr(tab + 1))});
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string quote(const ParamLine* line) {
  if (line == nullptr) return "no parameter there";
  return "'" + line->name + "' " + line->shape;
}

// Multiplies `values` by `factor` and returns true when every result is finite.
bool scale_and_check(std::span<float> values, float factor) {
  float acc = 0.0f;
  for (float& v : values) {
    v *= factor;
    acc += v * 0.0f;
  }
  return acc == 0.0f;
}

}  // namespace

Engine::Engine(EngineConfig config, const Communicator& comm)
    : config_(std::move(config)), comm_(comm) {
  config_.validate();
  nn::set_blas_threads(config_.blas_threads != 0
                           ? config_.blas_threads
                           : nn::default_blas_threads(static_cast<std::size_t>(comm_.local_size())));
  if (config_.mixed_precision == Precision::fp16) scaler_.emplace(config_.loss_scaler);
  stream_ = std::make_unique<CommStream>(comm_);
}

Engine::~Engine() {
  if (model_ != nullptr) model_->set_grad_ready_hook({});
  sync_.reset();    // waits for reductions in flight, returns the gradients their storage
  stream_.reset();  // joins the worker
}

// ---- preparing ------------------------------------------------------------------------------

void Engine::agree_across_ranks(std::string_view who, const std::string& description,
                                const std::string& local_error,
                                const std::string& extra_settings) const {
  idle_stream();
  const std::string settings = describe_settings(config_) + extra_settings;
  const std::array<std::int64_t, 3> mine = {
      local_error.empty() ? 0 : 1, static_cast<std::int64_t>(fnv1a(settings)),
      static_cast<std::int64_t>(fnv1a(description))};
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(comm_.size()));
  comm_.allgather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
  const std::string prefix = std::string(who) + " (rank " + std::to_string(comm_.rank()) + "): ";
  auto differs = [&](std::size_t field) {
    for (std::size_t r = 0; r < all.size(); r += mine.size()) {
      if (all[r + field] != all[field]) return true;
    }
    return false;
  };

  // 1. Some rank's own arguments are invalid: every rank learns which, and why.
  bool any_error = false;
  for (std::size_t r = 0; r < all.size(); r += mine.size()) any_error = any_error || all[r] != 0;
  if (any_error) {
    const std::vector<std::string> errors = comm_.allgather_strings(local_error);
    std::string failing;
    std::string causes;
    for (std::size_t r = 0; r < errors.size(); ++r) {
      if (errors[r].empty()) continue;
      failing += (failing.empty() ? "" : ", ") + std::to_string(r);
      causes += "; rank " + std::to_string(r) + ": " + errors[r];
    }
    throw std::invalid_argument(prefix + "invalid arguments on rank(s) " + failing + causes +
                                " (nothing was prepared, on any rank)");
  }

  // 2. The engine settings differ: name the first differing key, the ranks and the values.
  if (differs(1)) {
    const std::vector<std::string> texts = comm_.allgather_strings(settings);
    std::vector<std::vector<ParamLine>> lists;
    for (const std::string& t : texts) lists.push_back(parse_description(t));
    for (std::size_t i = 0; i < lists[0].size(); ++i) {
      std::string diffs;
      for (std::size_t r = 1; r < lists.size(); ++r) {
        const bool same = i < lists[r].size() && lists[r][i].name == lists[0][i].name &&
                          lists[r][i].shape == lists[0][i].shape;
        if (same) continue;
        diffs += ", rank " + std::to_string(r) + " has " +
                 (i < lists[r].size() && lists[r][i].name == lists[0][i].name
                      ? lists[r][i].shape
                      : std::string("no such setting"));
      }
      if (diffs.empty()) continue;
      throw std::invalid_argument(prefix + "the ranks' engine settings differ at " +
                                  lists[0][i].name + ": rank 0 has " + lists[0][i].shape + diffs +
                                  why_equal(lists[0][i].name));
    }
    // Rank 0's list is a prefix of another's (fp16 adds the loss scaler's keys, a loader
    // its own).
    for (std::size_t r = 1; r < lists.size(); ++r) {
      if (lists[r].size() > lists[0].size()) {
        const ParamLine& extra = lists[r][lists[0].size()];
        throw std::invalid_argument(prefix + "the ranks' engine settings differ at " + extra.name +
                                    ": rank 0 has no such setting, rank " + std::to_string(r) +
                                    " has " + extra.shape + why_equal(extra.name));
      }
    }
    throw std::runtime_error(prefix + "the ranks' engine settings hash differently but read the same");
  }

  // 3. The parameter lists differ: name the first differing parameter.
  if (!differs(2)) return;
  const std::vector<std::string> texts = comm_.allgather_strings(description);
  std::vector<std::vector<ParamLine>> lists;
  for (const std::string& t : texts) lists.push_back(parse_description(t));
  std::size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size());
  for (std::size_t i = 0; i < longest; ++i) {
    const ParamLine* ref = i < lists[0].size() ? &lists[0][i] : nullptr;
    std::string diffs;
    for (std::size_t r = 1; r < lists.size(); ++r) {
      const ParamLine* other = i < lists[r].size() ? &lists[r][i] : nullptr;
      const bool same = ref != nullptr && other != nullptr && ref->name == other->name &&
                        ref->shape == other->shape;
      if (same) continue;
      diffs += "; rank " + std::to_string(r) + " has " + quote(other);
    }
    if (diffs.empty()) continue;
    std::ostringstream msg;
    msg << prefix << "the ranks' models differ at parameter #" << i << ": rank 0 has "
        << quote(ref) << diffs << " (parameter counts by rank:";
    for (std::size_t r = 0; r < lists.size(); ++r) msg << (r ? ", " : " ") << lists[r].size();
    msg << ")";
    throw std::runtime_error(msg.str());
  }
  throw std::runtime_error(prefix + "the ranks' parameter lists hash differently but read the same");
}

void Engine::setup_sync(std::vector<SyncedParameter> params, std::string_view who,
                        const std::string& description, std::string local_error,
                        const std::string& extra_settings) {
  std::unordered_map<std::string, std::size_t> index_of_name;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const SyncedParameter& sp = params[k];
    if (!index_of_name.emplace(sp.parameter->name, k).second) {
      local_error += (local_error.empty() ? "" : "; ") +
                     ("two parameters are named '" + sp.parameter->name + "'");
    }
  }
  // Collective, before anything changes: every rank throws, or none does.
  agree_across_ranks(who, description, local_error, extra_settings);
  if (sync_) {
    if (model_ != nullptr) model_->set_grad_ready_hook({});
    sync_.reset();
  }
  model_ = nullptr;
  optimizer_ = nullptr;
  params_.clear();
  for (const SyncedParameter& sp : params) params_.push_back(sp.parameter);
  index_of_name_ = std::move(index_of_name);
  // The same initial values everywhere: rank 0's.
  if (comm_.size() > 1) {
    for (nn::Parameter* p : params_) comm_.broadcast(p->value.span(), 0);
  }
  GradientSyncOptions options;
  options.bucket_cap_bytes = config_.bucket_cap_bytes();
  options.first_bucket_bytes = config_.first_bucket_bytes();
  options.overlap = config_.overlap;
  options.comm_dtype = config_.grad_comm_dtype;
  options.algorithm = config_.allreduce_algorithm;
  options.unused_parameters = config_.unused_parameters;
  sync_ = std::make_unique<GradientSync>(std::move(params), *stream_, options);
  window_pos_ = 0;
  step_pending_ = false;
}

void Engine::prepare(nn::Module& model, nn::Optimizer& optimizer) {
  prepare_model(model, optimizer, nullptr);
}

void Engine::prepare_model(nn::Module& model, nn::Optimizer& optimizer,
                           const data::DataLoader* training_loader) {
  std::vector<nn::Parameter*> params = model.parameters();
  const std::unordered_set<const nn::Parameter*> in_model(params.begin(), params.end());
  std::string error;
  for (const nn::Parameter* p : optimizer.parameters()) {
    if (in_model.count(p) == 0) {
      error += (error.empty() ? "" : "; ") +
               ("optimizer parameter '" + p->name + "' is not a parameter of the model");
    }
  }
  // The loader is checked and compared in the same agreement, so that prepare_loader(),
  // which prepare(model, optimizer, loader) calls next, cannot fail on one rank only.
  std::string loader_settings;
  if (training_loader != nullptr) {
    const data::DataLoaderOptions target =
        sharded_options(*training_loader, static_cast<std::size_t>(comm_.size()),
                        static_cast<std::size_t>(comm_.rank()), config_);
    const std::string loader_error = training_loader_error(*training_loader, target);
    if (!loader_error.empty()) error += (error.empty() ? "" : "; ") + loader_error;
    loader_settings = describe_loader(*training_loader, target);
  }
  std::vector<SyncedParameter> synced;
  for (nn::Parameter* p : params) synced.push_back({p, {}});
  setup_sync(std::move(synced), "Engine::prepare", describe(params), std::move(error),
             loader_settings);
  model.set_grad_ready_hook([this](nn::Parameter& p) { sync_->mark_ready(p); });
  model.set_requires_input_grad(false);
  model.set_precision(config_.mixed_precision);
  model_ = &model;
  optimizer_ = &optimizer;
  install_random_streams();
}

void Engine::install_random_streams() {
  if (model_ == nullptr) return;
  // Every rank its own dropout masks (as torch ranks seeded differently would draw), from
  // streams that depend only on the seed and the rank, so a run is reproducible.
  std::uint64_t purpose = 1;
  for (auto& [path, stream] : model_->random_streams()) *stream = process_rng(purpose++);
}

void Engine::set_seed(std::uint64_t seed) {
  config_.seed = seed;
  install_random_streams();
}

void Engine::prepare(nn::Module& model, nn::Optimizer& optimizer, data::DataLoader& loader,
                     nn::LrScheduler* scheduler) {
  prepare_model(model, optimizer, &loader);
  prepare_loader(loader, true);
  scheduler_step_ = nullptr;
  scheduler_ = scheduler;
  if (scheduler != nullptr) scheduler_step_ = [scheduler] { scheduler->step(); };
}

data::DataLoader Engine::make_loader(std::shared_ptr<const data::Dataset> dataset,
                                     data::DataLoaderOptions options) const {
  options.world_size = static_cast<std::size_t>(comm_.size());
  options.rank = static_cast<std::size_t>(comm_.rank());
  options.split_batches = config_.split_batches;
  options.even_batches = config_.even_batches;
  return data::DataLoader(std::move(dataset), options);
}

void Engine::prepare_loader(data::DataLoader& loader, bool training) {
  const data::DataLoaderOptions target =
      sharded_options(loader, static_cast<std::size_t>(comm_.size()),
                      static_cast<std::size_t>(comm_.rank()), config_);
  if (training) {
    const std::string error = training_loader_error(loader, target);
    if (!error.empty()) throw std::invalid_argument("Engine::prepare_loader: " + error);
  }
  if (!already_sharded(loader, target)) {
    // The original loader keeps owning the dataset; the engine keeps the original alive.
    // Built first, so that an invalid sharding throws with `loader` untouched.
    std::shared_ptr<const data::Dataset> dataset(std::shared_ptr<const data::Dataset>(),
                                                 &loader.dataset());
    data::DataLoader rebuilt = make_loader(std::move(dataset), loader.options());
    rebuilt.set_epoch(loader.epoch());
    retired_loaders_.push_back(std::make_unique<data::DataLoader>(std::move(loader)));
    loader = std::move(rebuilt);
  }
  if (!training) return;
  train_loader_ = &loader;
  state_.epoch = static_cast<std::uint64_t>(std::max<std::int64_t>(0, loader.epoch()));
  state_.batches_in_epoch = loader.position();
}

void Engine::register_parameters(std::vector<ExternalParameter> params) {
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  std::vector<SyncedParameter> synced;
  std::string description;
  std::string error;
  for (ExternalParameter& e : params) {
    description += e.name + '\t' + mpitrain::to_string(e.shape) + '\n';
    const std::size_t n = mpitrain::numel(e.shape);
    if (e.value.size() != n || (!e.grad.empty() && e.grad.size() != n)) {
      error += (error.empty() ? "" : "; ") +
               ("'" + e.name + "' has shape " + mpitrain::to_string(e.shape) + " (" + std::to_string(n) +
                " values) but " + std::to_string(e.value.size()) + " values and " +
                std::to_string(e.grad.size()) + " gradients");
      continue;
    }
    auto p = std::make_unique<nn::Parameter>();
    p->name = e.name;
    p->value = Tensor::view(e.value, e.shape);
    if (!e.grad.empty()) p->grad = Tensor::view(e.grad, e.shape);
    synced.push_back({p.get(), e.grad});
    owned.push_back(std::move(p));
  }
  setup_sync(std::move(synced), "Engine::register_parameters", description, std::move(error));
  external_params_ = std::move(owned);
}

std::span<float> Engine::gradient(std::string_view name) {
  const auto it = index_of_name_.find(std::string(name));
  if (it == index_of_name_.end() || !sync_) {
    throw std::invalid_argument("Engine::gradient: no registered parameter '" + std::string(name) + "'");
  }
  return sync_->gradient_slot(it->second);
}

// ---- micro-steps ----------------------------------------------------------------------------

bool Engine::next_batch(data::Batch& out) {
  if (train_loader_ == nullptr) throw std::logic_error("Engine::next_batch: no training loader prepared");
  const bool got = train_loader_->next(out);
  state_.epoch = static_cast<std::uint64_t>(std::max<std::int64_t>(0, train_loader_->epoch()));
  state_.batches_in_epoch = train_loader_->position();
  if (!got) return false;
  // Real examples of this step over all ranks: every batch but the epoch's last is a full
  // global batch of real examples; the last holds the rest.
  const std::size_t global = train_loader_->sharding().global_batch_size();
  const std::size_t full = (train_loader_->batches_per_epoch() - 1) * global;
  const std::size_t per_epoch = train_loader_->real_samples_per_epoch();
  state_.samples_seen += out.is_last ? (per_epoch > full ? per_epoch - full : 0)
                                     : std::min(global, per_epoch);
  return true;
}

Engine::MicroStep Engine::accumulate() {
  if (micro_open_) throw std::logic_error("Engine::accumulate: a micro-step is already open");
  begin_micro_step();
  return MicroStep(this);
}

Engine::NoSync Engine::no_sync() { return NoSync(this); }

void Engine::begin_micro_step() {
  micro_open_ = true;
  backward_in_micro_ = false;
  const bool window_full = window_pos_ + 1 >= config_.gradient_accumulation_steps;
  const bool loader_end = config_.sync_with_dataloader && train_loader_ != nullptr &&
                          train_loader_->position() > 0 && train_loader_->end_of_epoch();
  sync_gradients_ = no_sync_depth_ == 0 && (window_full || loader_end);
}

void Engine::end_micro_step() {
  micro_open_ = false;
  ++state_.micro_step;
  window_pos_ = sync_gradients_ ? 0 : window_pos_ + 1;
}

float Engine::loss_gradient_scale() const noexcept {
  return static_cast<float>(static_cast<double>(loss_scale()) /
                            (static_cast<double>(config_.gradient_accumulation_steps) *
                             static_cast<double>(comm_.size())));
}

void Engine::run_backward(const std::function<void()>& body) {
  if (!sync_) throw std::logic_error("Engine::backward before prepare() or register_parameters()");
  const bool implicit = !micro_open_;
  if (!implicit && backward_in_micro_) {
    throw std::logic_error("Engine::backward: one backward per accumulate() micro-step (a second "
                           "one would reduce gradients that are already reduced)");
  }
  if (implicit) begin_micro_step();
  backward_in_micro_ = true;
  const auto t0 = Clock::now();
  try {
    if (sync_gradients_) {
      sync_->begin_sync();
      try {
        body();
      } catch (...) {
        sync_->abort();
        throw;
      }
      const SyncReport report = sync_->finish();
      timings_.comm_wait_seconds = report.wait_seconds;
      timings_.buckets = sync_->buckets().size();
      timings_.buckets_launched_early = report.buckets_launched_early;
      timings_.backward_seconds = seconds_since(t0);
      step_pending_ = true;
      unscaled_ = false;
      grads_finite_ = true;
      first_non_finite_.clear();
    } else {
      body();
    }
  } catch (...) {
    if (implicit) end_micro_step();
    throw;
  }
  if (implicit) end_micro_step();
}

void Engine::backward(const Tensor& loss_grad) {
  if (model_ == nullptr) throw std::logic_error("Engine::backward(loss_grad) needs a prepared model");
  run_backward([this, &loss_grad] {
    scaled_grad_.resize(loss_grad.shape());
    const float factor = loss_gradient_scale();
    const float* in = loss_grad.data();
    float* out = scaled_grad_.data();
    for (std::size_t i = 0; i < loss_grad.numel(); ++i) out[i] = in[i] * factor;
    model_->backward(scaled_grad_);
  });
}

void Engine::backward(const std::function<void()>& run) { run_backward(run); }

void Engine::grad_ready(std::string_view name) {
  const auto it = index_of_name_.find(std::string(name));
  if (it == index_of_name_.end()) {
    throw std::invalid_argument("Engine::grad_ready: no registered parameter '" + std::string(name) + "'");
  }
  grad_ready(it->second);
}

void Engine::grad_ready(std::size_t index) {
  if (!sync_) throw std::logic_error("Engine::grad_ready before register_parameters()");
  sync_->mark_ready(index);
}

// ---- after backward -----------------------------------------------------------------------------

std::vector<std::span<float>> Engine::gradient_spans() { return sync_->gradient_spans(); }

bool Engine::unscale_and_check() {
  if (unscaled_) return grads_finite_;
  bool finite = true;
  if (loss_scale() != 1.0f) {
    // torch: inv_scale = float(1 / double(scale)); a power of two, so exact.
    const float inv = static_cast<float>(1.0 / static_cast<double>(loss_scale()));
    for (std::span<float> s : gradient_spans()) finite = scale_and_check(s, inv) && finite;
    sync_->copy_out();
  } else {
    for (std::span<float> s : gradient_spans()) finite = all_finite(s) && finite;
  }
  unscaled_ = true;
  grads_finite_ = finite;
  // Named now, before clip_grad_value can clamp an inf to a finite value.
  if (!finite) first_non_finite_ = first_non_finite_gradient();
  return finite;
}

double Engine::clip_grad_norm(double max_norm, double norm_type) {
  const bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  if (!inf_norm && norm_type != 2.0) {
    throw std::invalid_argument("Engine::clip_grad_norm: norm_type must be 2 or infinity, not " +
                                std::to_string(norm_type));
  }
  if (!(max_norm >= 0.0)) {
    throw std::invalid_argument("Engine::clip_grad_norm: max_norm must be >= 0, not " +
                                std::to_string(max_norm));
  }
  if (!step_pending_) return std::numeric_limits<double>::quiet_NaN();
  // The gradients are identical on every rank after synchronisation: the norm is local.
  const std::vector<std::span<float>> spans = gradient_spans();
  double norm = 0.0;
  for (std::span<const float> s : spans) {
    if (inf_norm) {
      float m = 0.0f;
      for (float v : s) m = std::max(m, std::fabs(v)) + v * 0.0f;  // NaN propagates
      norm = std::max(norm, static_cast<double>(m)) + static_cast<double>(m) * 0.0;
    } else {
      double sq = 0.0;
      for (float v : s) sq += static_cast<double>(v) * static_cast<double>(v);
      norm += sq;
    }
  }
  if (!inf_norm) norm = std::sqrt(norm);
  const double scale = unscaled_ ? 1.0 : static_cast<double>(loss_scale());
  const double true_norm = norm / scale;
  if (!std::isfinite(true_norm)) {
    unscaled_ = true;  // the step will be skipped (or fail): the values no longer matter
    grads_finite_ = false;
    first_non_finite_ = first_non_finite_gradient();  // before clip_grad_value may clamp
    return true_norm;
  }
  // torch: clip_coef = max_norm / (total_norm + 1e-6), applied when below 1. Removing the loss
  // scale is folded into the same multiplication.
  const double clip_coef = max_norm / (true_norm + 1e-6);
  const double factor = std::min(clip_coef, 1.0) / scale;
  if (factor != 1.0) {
    const float f = static_cast<float>(factor);
    for (std::span<float> s : spans) {
      for (float& v : s) v *= f;
    }
    sync_->copy_out();
  }
  unscaled_ = true;
  grads_finite_ = true;
  return true_norm;
}

void Engine::clip_grad_value(double clip_value) {
  if (!(clip_value >= 0.0)) {
    throw std::invalid_argument("Engine::clip_grad_value: clip_value must be >= 0, not " +
                                std::to_string(clip_value));
  }
  if (!step_pending_) return;
  unscale_and_check();
  const float c = static_cast<float>(clip_value);
  for (std::span<float> s : gradient_spans()) {
    for (float& v : s) v = std::clamp(v, -c, c);
  }
  sync_->copy_out();
}

bool Engine::step() {
  if (!step_pending_) return false;
  step_pending_ = false;
  const bool finite = unscale_and_check();
  const std::uint64_t this_step = state_.step;
  ++state_.step;
  last_step_skipped_ = true;
  if (scaler_ && scaler_->enabled()) {
    // Backward passes use scale() until this update; the next window uses the new one.
    const bool skip = scaler_->update(!finite, static_cast<std::int64_t>(this_step));
    if (skip) {
      ++state_.skipped_steps;
      return false;
    }
  } else if (!finite) {
    if (config_.nan_policy == NanPolicy::error) {
      throw std::runtime_error("Engine::step (rank " + std::to_string(comm_.rank()) + "): step " +
                               std::to_string(this_step) + " has inf/NaN gradients, first in '" +
                               first_non_finite_ +
                               "' (the same on every rank after synchronisation); "
                               "nan_policy = error");
    }
    ++state_.skipped_steps;
    return false;
  }
  last_step_skipped_ = false;
  if (optimizer_ != nullptr) optimizer_->step();
  if (scheduler_step_) scheduler_step_();
  return true;
}

std::string Engine::first_non_finite_gradient() {
  for (std::size_t k = 0; k < params_.size(); ++k) {
    if (!all_finite(sync_->gradient_slot(k))) return params_[k]->name;
  }
  return "?";
}

void Engine::zero_grad() {
  if (!sync_gradients_) return;
  zero_all_gradients();
}

void Engine::zero_all_gradients() {
  if (!sync_) return;
  sync_->zero_grad();
  // A gradient someone replaced by its own tensor is not in the buckets (yet).
  for (std::size_t k = 0; k < params_.size(); ++k) {
    if (params_[k]->grad.data() != sync_->gradient_slot(k).data()) params_[k]->grad.zero();
  }
}

// ---- process helpers --------------------------------------------------------------------------------

void Engine::idle_stream() const { stream_->synchronize(); }

Engine::MainProcessFirst Engine::main_process_first() { return MainProcessFirst(this); }

Engine::MainProcessFirst::MainProcessFirst(const Engine* e) : engine_(e) {
  // The others wait here until the main process leaves its block.
  if (!engine_->is_main_process()) engine_->wait_for_everyone();
}

Engine::MainProcessFirst::~MainProcessFirst() {
  if (engine_ == nullptr || !engine_->is_main_process()) return;
  try {
    engine_->wait_for_everyone();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank 0] main_process_first: barrier failed: %s\n", e.what());
  }
}

void Engine::print(std::string_view text) const {
  if (!is_main_process()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void Engine::wait_for_everyone() const {
  idle_stream();
  comm_.barrier();
}

Tensor Engine::gather(const Tensor& t) const {
  Shape rest;
  if (t.rank() > 0) rest.assign(t.shape().begin() + 1, t.shape().end());
  const std::string rest_text = t.rank() == 0 ? std::string("scalar") : mpitrain::to_string(rest);
  const std::vector<std::int64_t> fingerprints =
      comm_.allgather_value<std::int64_t>(static_cast<std::int64_t>(fnv1a(rest_text)));
  for (std::size_t r = 0; r < fingerprints.size(); ++r) {
    if (fingerprints[r] != fingerprints[0]) {
      throw std::invalid_argument("Engine::gather (rank " + std::to_string(comm_.rank()) +
                                  "): the tensors' shapes beyond dim 0 differ between rank 0 and rank " +
                                  std::to_string(r) + " (this rank: " + mpitrain::to_string(t.shape()) + ")");
    }
  }
  std::vector<float> all = gather(t.span());
  const std::size_t width = mpitrain::numel(rest);
  Shape shape;
  shape.push_back(width == 0 ? 0 : all.size() / width);
  shape.insert(shape.end(), rest.begin(), rest.end());
  Tensor out(shape);
  std::copy(all.begin(), all.end(), out.data());
  return out;
}

Tensor Engine::gather_for_metrics(const Tensor& t, std::size_t real_rows) const {
  if (t.rank() == 0) return gather(t);
  const std::size_t keep = std::min(real_rows, t.dim(0));
  if (keep == t.dim(0)) return gather(t);
  Shape shape = t.shape();
  shape[0] = keep;
  const std::size_t width = t.dim(0) == 0 ? 0 : t.numel() / t.dim(0);
  Tensor head(shape);
  std::copy_n(t.data(), keep * width, head.data());
  return gather(head);
}

Tensor Engine::pad_across_processes(const Tensor& t, float pad_value, bool pad_first) const {
  if (t.rank() == 0) return t;
  idle_stream();
  const std::int64_t rows = static_cast<std::int64_t>(t.dim(0));
  const std::size_t max_rows = static_cast<std::size_t>(comm_.allreduce_value(rows, ReduceOp::max));
  Shape shape = t.shape();
  shape[0] = max_rows;
  Tensor out(shape);
  out.fill(pad_value);
  const std::size_t offset = pad_first ? out.numel() - t.numel() : 0;
  std::copy_n(t.data(), t.numel(), out.data() + offset);
  return out;
}

Tensor Engine::reduce(const Tensor& t, ReduceOp op) const {
  idle_stream();
  Tensor out(t.shape());
  std::copy_n(t.data(), t.numel(), out.data());
  comm_.allreduce(out.span(), op);
  return out;
}

double Engine::reduce(double value, ReduceOp op) const {
  idle_stream();
  return comm_.allreduce_value(value, op);
}

nn::Rng Engine::process_rng(std::uint64_t purpose) const noexcept {
  // Streams with the top bit set: far from model_rng() (stream 0) and make_mlp's dropout
  // streams (1 + child index). 24 bits of rank, 39 bits of purpose.
  const std::uint64_t stream = (1ULL << 63) | ((purpose & ((1ULL << 39) - 1)) << 24) |
                               (static_cast<std::uint64_t>(comm_.rank()) & 0xffffffULL);
  return nn::Rng(config_.seed, stream);
}

void Engine::restore_counters(const EngineState& state) {
  state_ = state;
  window_pos_ = 0;
  step_pending_ = false;
}

}  // namespace mpitrain
