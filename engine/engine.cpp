// Engine: construction, the random streams it hands out, and its counters. The rest is one
// file per concern: engine_prepare.cpp (set-up), engine_step.cpp (the training step),
// engine_clipping.cpp, engine_checkpoint.cpp with engine_checkpoint_groups.cpp, and
// engine_process_helpers.cpp.

#include "mpitrain/engine/engine.hpp"

#include <chrono>
#include <utility>

#include "mpitrain/engine/thread_level_requirement.hpp"
#include "mpitrain/nn/blas_threads.hpp"

namespace mpitrain {

Engine::Engine(EngineConfig config, const Communicator& comm)
    : config_(std::move(config)), comm_(comm), phase_(config_.gradient_accumulation_steps) {
  config_.validate();
  check_thread_level(config_, comm_.thread_level(), comm_.rank());
  nn::set_blas_threads(config_.blas_threads != 0
                           ? config_.blas_threads
                           : nn::default_blas_threads(static_cast<std::size_t>(comm_.local_size())));
  if (config_.mixed_precision == Precision::fp16) scaler_.emplace(config_.loss_scaler);
  if (config_.timeout_s) {
    comm_.set_timeout(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(*config_.timeout_s)));
  }
  if (config_.timeout_action) comm_.set_timeout_action(*config_.timeout_action);
  if (config_.debug_collectives) comm_.set_debug_collectives(true);
  stream_ = std::make_unique<CommStream>(comm_);
}

Engine::~Engine() {
  if (model_ != nullptr) model_->set_grad_ready_hook({});
  sync_.reset();    // waits for reductions in flight, returns the gradients their storage
  stream_.reset();  // joins the worker
}

void Engine::idle_stream() const { stream_->synchronize(); }

void Engine::set_seed(std::uint64_t seed) {
  config_.seed = seed;
  install_random_streams();
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
  phase_.restart_window();
}


}  // namespace mpitrain
