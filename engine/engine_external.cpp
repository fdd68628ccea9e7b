// Bring your own model, beyond its parameters: an optimizer the engine steps and
// checkpoints (set_optimizer), and the model's buffers (register_buffers, broadcast_buffers),
// which is what an adapter such as mpitrain::libtorch plugs a foreign model in with.
//
// Cost of broadcast_buffers(): one broadcast of all fp32 buffer values and one of the int64
// ones (B values in total: B copies in, a broadcast of B values, B copies out).

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>

#include "mpitrain/engine/detail/prepare_agreement.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/engine/engine.hpp"

namespace mpitrain {
namespace {

// Returns why `b` cannot be registered, or "".
std::string buffer_error(const ExternalBuffer& b) {
  if (!checkpoint::is_valid_object_name(b.name)) {
    return "buffer '" + b.name + "'" + detail::kBadNameReason;
  }
  const std::size_t n = numel(b.shape);
  const bool floats = !b.value.empty();
  const bool ints = !b.integers.empty();
  if (floats == ints) {
    return "buffer '" + b.name + "' must hold either fp32 values or int64 values (it holds " +
           (floats ? "both" : "neither") + ")";
  }
  if (ints && (n != 1 || b.integers.size() != 1)) {
    return "buffer '" + b.name + "' holds " + std::to_string(b.integers.size()) +
           " int64 values; int64 buffers of one value only";
  }
  if (floats && b.value.size() != n) {
    return "buffer '" + b.name + "' has shape " + to_string(b.shape) + " (" + std::to_string(n) +
           " values) but " + std::to_string(b.value.size()) + " values";
  }
  return "";
}

}  // namespace

void Engine::set_optimizer(nn::Optimizer& optimizer) {
  const std::unordered_set<const nn::Parameter*> registered(params_.begin(), params_.end());
  for (const nn::Parameter* p : optimizer.parameters()) {
    if (registered.count(p) == 0) {
      throw std::invalid_argument("Engine::set_optimizer: optimizer parameter '" + p->name +
                                  "' is not a registered parameter");
    }
  }
  optimizer_ = &optimizer;
  try {
    shard_optimizer();
  } catch (...) {
    optimizer_ = nullptr;
    throw;
  }
}

void Engine::register_buffers(std::vector<ExternalBuffer> buffers) {
  std::string description;
  std::string error;
  std::unordered_set<std::string> names;
  for (const ExternalBuffer& b : buffers) {
    description += b.name + '\t' + to_string(b.shape) + (b.integers.empty() ? "\tf32\n" : "\ti64\n");
    std::string why = buffer_error(b);
    if (why.empty() && !names.insert(b.name).second) why = "two buffers are named '" + b.name + "'";
    if (!why.empty()) error += (error.empty() ? "" : "; ") + why;
  }
  idle_stream();
  detail::agree_on_prepare(comm_, "Engine::register_buffers", "", description, error);
  buffers_ = std::move(buffers);
}

void Engine::broadcast_buffers() {
  if (comm_.size() == 1 || buffers_.empty()) return;
  idle_stream();
  std::vector<float> values;
  std::vector<std::int64_t> integers;
  for (const ExternalBuffer& b : buffers_) {
    values.insert(values.end(), b.value.begin(), b.value.end());
    integers.insert(integers.end(), b.integers.begin(), b.integers.end());
  }
  if (!values.empty()) comm_.broadcast(std::span<float>(values), 0);
  if (!integers.empty()) comm_.broadcast(std::span<std::int64_t>(integers), 0);
  std::size_t v = 0;
  std::size_t i = 0;
  for (const ExternalBuffer& b : buffers_) {
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(v), b.value.size(), b.value.begin());
    std::copy_n(integers.begin() + static_cast<std::ptrdiff_t>(i), b.integers.size(), b.integers.begin());
    v += b.value.size();
    i += b.integers.size();
  }
}

}  // namespace mpitrain
