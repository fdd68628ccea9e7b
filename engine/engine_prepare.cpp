// Engine set-up: prepare() and register_parameters() (checked and agreed across ranks
// before anything changes, engine_prepare_agreement.cpp), then the parameters' broadcast
// from rank 0 (one broadcast per parameter) and the gradient buckets; prepare_loader()
// shards loaders for this rank.

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/data/batch_sharding.hpp"
#include "mpitrain/engine/detail/prepare_agreement.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

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
}  // namespace

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
  idle_stream();
  detail::agree_on_prepare(comm_, who, detail::describe_settings(config_) + extra_settings,
                           description, local_error);
  if (sync_) {
    if (model_ != nullptr) model_->set_grad_ready_hook({});
    shard_optimizer_.reset();  // its pieces view the old synchroniser's shard
    shard_params_.clear();
    shard_begin_.clear();
    sync_.reset();
  }
  model_ = nullptr;
  optimizer_ = nullptr;
  buffers_.clear();
  params_.clear();
  for (const SyncedParameter& sp : params) params_.push_back(sp.parameter);
  index_of_name_ = std::move(index_of_name);
  // The same initial values everywhere: rank 0's.
  if (comm_.size() > 1) {
    const Communicator::CallSite site(comm_, "Engine::prepare");
    for (nn::Parameter* p : params_) comm_.broadcast(p->value.span(), 0);
  }
  GradientSyncOptions options;
  options.bucket_cap_bytes = config_.bucket_cap_bytes();
  options.first_bucket_bytes = config_.first_bucket_bytes();
  options.overlap = config_.overlap;
  options.comm_dtype = config_.grad_comm_dtype;
  options.algorithm = config_.allreduce_algorithm;
  options.unused_parameters = config_.unused_parameters;
  options.shard = config_.zero_stage == 1;
  sync_ = std::make_unique<GradientSync>(std::move(params), *stream_, options);
  phase_.restart_window();
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
  shard_optimizer();
  install_random_streams();
}

void Engine::install_random_streams() {
  if (model_ == nullptr) return;
  // Every rank its own dropout masks (as torch ranks seeded differently would draw), from
  // streams that depend only on the seed and the rank, so a run is reproducible.
  std::uint64_t purpose = 1;
  for (auto& [path, stream] : model_->random_streams()) *stream = process_rng(purpose++);
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

namespace {

// Returns why two of `params` may not be registered together because their values (or their
// gradient buffers) share memory, or "": a tied tensor registered under two names would be
// reduced twice and stepped twice per step.
std::string shared_memory_error(const std::vector<ExternalParameter>& params) {
  for (const bool grads : {false, true}) {
    struct Range {
      const float* begin;
      const float* end;
      const std::string* name;
    };
    std::vector<Range> ranges;
    for (const ExternalParameter& e : params) {
      const std::span<float> s = grads ? e.grad : e.value;
      if (!s.empty()) ranges.push_back({s.data(), s.data() + s.size(), &e.name});
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return std::less<>()(a.begin, b.begin); });
    for (std::size_t i = 1; i < ranges.size(); ++i) {
      if (std::less<>()(ranges[i].begin, ranges[i - 1].end)) {
        return "'" + *ranges[i - 1].name + "' and '" + *ranges[i].name + "' share " +
               (grads ? "gradient" : "value") +
               " memory (register a tied tensor once, under one name)";
      }
    }
  }
  return "";
}

}  // namespace

void Engine::register_parameters(std::vector<ExternalParameter> params) {
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  std::vector<SyncedParameter> synced;
  std::string description;
  std::string error;
  for (ExternalParameter& e : params) {
    description += e.name + '\t' + mpitrain::to_string(e.shape) + '\n';
    const std::size_t n = mpitrain::numel(e.shape);
    if (!checkpoint::is_valid_object_name(e.name)) {
      error += (error.empty() ? "" : "; ") + ("'" + e.name + "'" + detail::kBadNameReason);
      continue;
    }
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
  if (std::string shared = shared_memory_error(params); !shared.empty()) {
    error += (error.empty() ? "" : "; ") + shared;
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

}  // namespace mpitrain
