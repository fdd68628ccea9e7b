// Process helpers (main process, printing, barriers) and the collectives on tensors the
// engine offers (gather, gather_for_metrics, pad_across_processes, reduce). Each runs on the
// calling thread while the engine's CommStream is idle.

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "mpitrain/engine/detail/prepare_agreement.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {

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
    engine_->log("error", std::string("main_process_first: barrier failed: ") + e.what());
  }
}

void Engine::print(std::string_view text) const { log("info", text); }

void Engine::log(std::string_view level, std::string_view text) const {
  if (!is_main_process()) return;
  if (config_.log) {
    config_.log(level, text);
    return;
  }
  std::FILE* out = level == "info" ? stdout : stderr;
  if (level == "info") {
    fmt::print(out, "{}\n", text);
  } else {
    fmt::print(out, "mpitrain: {}: {}\n", level, text);
  }
  std::fflush(out);
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
      comm_.allgather_value<std::int64_t>(static_cast<std::int64_t>(detail::fingerprint(rest_text)));
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
  const Communicator::CallSite site(comm_, "Engine::reduce");
  comm_.allreduce(out.span(), op);
  return out;
}

double Engine::reduce(double value, ReduceOp op) const {
  idle_stream();
  const Communicator::CallSite site(comm_, "Engine::reduce");
  return comm_.allreduce_value(value, op);
}

}  // namespace mpitrain
