// Sgd step. Cost per step: one pass over every parameter with a gradient, reading the
// gradient, the value (and the momentum buffer) and writing the value (and the buffer):
// 2-4 flops and 12-20 bytes of memory traffic per element; no allocation after the first
// step with momentum.
//
// Bitwise agreement with torch: torch's CPU kernels evaluate `a.add_(b, alpha=s)` as
// fma(b, s, a) (explicit in its vectorised path, contracted by the compiler in its scalar
// tail) with every scalar first rounded to float32. This file writes the same fmas with
// std::fma and rounds the scalars the same way. Every addition here is such an fma, so the
// compiler's own contraction of a*b+c (GCC's C++ default, -ffp-contract=fast) has nothing
// left to fuse.

#include "mpitrain/nn/sgd.hpp"

#include <cmath>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>

namespace mpitrain::nn {
namespace {

// std::fma only vectorises where the target has FMA instructions; on x86-64 Linux the update
// is compiled twice and the loader picks the FMA version when the CPU has it. Both versions
// compute the same correctly rounded fma, so results do not depend on the CPU.
// Not under ThreadSanitizer (make sanitize-tsan): the loader runs the clones' resolver
// before TSan's runtime starts, and the instrumented resolver crashes the program.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
#define MPITRAIN_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define MPITRAIN_FMA_CLONES
#endif

// The update's scalars, rounded to float32 as torch's kernels round them.
struct Scalars {
  float sign;          // -1 to maximize, else 1 (multiplying by +-1 is exact)
  float weight_decay;  // weight_decay
  float momentum;      // momentum
  float damped;        // 1 - dampening
  float neg_lr;        // -lr
};

enum class Buffer { none, first, update };

template <bool kDecay, Buffer kBuffer, bool kNesterov>
[[gnu::always_inline]] inline void update(std::span<float> param, std::span<const float> grad,
                                          std::span<float> buffer, const Scalars& s) {
  float* p = param.data();
  const float* g = grad.data();
  float* b = buffer.data();
  const std::size_t n = param.size();
  for (std::size_t i = 0; i < n; ++i) {
    float d = g[i] * s.sign;
    if constexpr (kDecay) d = std::fma(p[i], s.weight_decay, d);
    if constexpr (kBuffer == Buffer::first) b[i] = d;
    if constexpr (kBuffer == Buffer::update) {
      const float kept = b[i] * s.momentum;
      b[i] = std::fma(d, s.damped, kept);
    }
    if constexpr (kBuffer != Buffer::none) d = kNesterov ? std::fma(b[i], s.momentum, d) : b[i];
    p[i] = std::fma(d, s.neg_lr, p[i]);
  }
}

template <bool kDecay>
[[gnu::always_inline]] inline void update_with(Buffer mode, bool nesterov, std::span<float> param,
                                               std::span<const float> grad,
                                               std::span<float> buffer, const Scalars& s) {
  switch (mode) {
    case Buffer::none:
      return update<kDecay, Buffer::none, false>(param, grad, buffer, s);
    case Buffer::first:
      return nesterov ? update<kDecay, Buffer::first, true>(param, grad, buffer, s)
                      : update<kDecay, Buffer::first, false>(param, grad, buffer, s);
    case Buffer::update:
      return nesterov ? update<kDecay, Buffer::update, true>(param, grad, buffer, s)
                      : update<kDecay, Buffer::update, false>(param, grad, buffer, s);
  }
}

// Applies one SGD update to `param` (n values) from `grad`; `buffer` is the momentum buffer
// (empty when mode is none).
MPITRAIN_FMA_CLONES void update_param(bool decay, Buffer mode, bool nesterov,
                                      std::span<float> param, std::span<const float> grad,
                                      std::span<float> buffer, const Scalars& s) {
  if (decay) {
    update_with<true>(mode, nesterov, param, grad, buffer, s);
  } else {
    update_with<false>(mode, nesterov, param, grad, buffer, s);
  }
}

// Throws std::invalid_argument for options torch.optim.SGD rejects.
void check_options(const SgdOptions& o, std::string_view who) {
  const std::string w(who);
  if (std::isnan(o.lr)) {
    throw std::invalid_argument(w + ": lr must be set (torch.optim.SGD has no default)");
  }
  if (!(o.momentum >= 0.0) || !std::isfinite(o.momentum)) {
    throw std::invalid_argument(w + ": invalid momentum value " + std::to_string(o.momentum));
  }
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    throw std::invalid_argument(w + ": invalid weight_decay value " +
                                std::to_string(o.weight_decay));
  }
  if (!std::isfinite(o.dampening)) {
    throw std::invalid_argument(w + ": invalid dampening value " + std::to_string(o.dampening));
  }
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    throw std::invalid_argument(w + ": Nesterov momentum requires a momentum and zero dampening");
  }
}

const SgdOptions& checked(const SgdOptions& o) {
  check_options(o, "Sgd");
  return o;
}

std::string step_key(const Parameter& p) { return p.name + "/step"; }
std::string buffer_key(const Parameter& p) { return p.name + "/momentum_buffer"; }

const std::set<std::string> kHyperKeys = {"lr",           "momentum", "dampening",
                                          "weight_decay", "nesterov", "maximize"};

}  // namespace

Sgd::Sgd(std::vector<Parameter*> params, const SgdOptions& options)
    : Optimizer(std::move(params), checked(options).lr), options_(options) {
  state_.resize(params_.size());
}

SgdOptions Sgd::options() const {
  SgdOptions o = options_;
  o.lr = lr_;
  return o;
}

void Sgd::step() {
  // Check every gradient before touching any parameter, so a bad one changes nothing.
  for (const Parameter* p : params_) has_grad(*p, "Sgd::step");

  const Scalars s{options_.maximize ? -1.0f : 1.0f, static_cast<float>(options_.weight_decay),
                  static_cast<float>(options_.momentum),
                  static_cast<float>(1.0 - options_.dampening), static_cast<float>(-lr_)};
  const bool decay = options_.weight_decay != 0.0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!has_grad(p, "Sgd::step")) continue;
    ParamState& st = state_[i];
    Buffer mode = Buffer::none;
    if (options_.momentum != 0.0) {
      if (st.step == 0) {
        st.momentum_buffer = Tensor(p.value.shape());
        mode = Buffer::first;
      } else {
        mode = Buffer::update;
      }
    }
    update_param(decay, mode, options_.nesterov, p.value.span(), p.grad.span(),
                 st.momentum_buffer.span(), s);
    ++st.step;
  }
}

StateDict Sgd::state_dict() const {
  StateDict out;
  out.scalars = {{"lr", lr_},
                 {"momentum", options_.momentum},
                 {"dampening", options_.dampening},
                 {"weight_decay", options_.weight_decay},
                 {"nesterov", options_.nesterov ? 1.0 : 0.0},
                 {"maximize", options_.maximize ? 1.0 : 0.0}};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    out.scalars[step_key(p)] = static_cast<double>(state_[i].step);
    if (state_[i].step > 0 && options_.momentum != 0.0) {
      out.tensors[buffer_key(p)] = clone(state_[i].momentum_buffer);
    }
  }
  return out;
}

void Sgd::load_state_dict(const StateDict& state) {
  constexpr std::string_view who = "Sgd::load_state_dict";
  SgdOptions o;
  o.lr = scalar_at(state, "lr", who);
  o.momentum = scalar_at(state, "momentum", who);
  o.dampening = scalar_at(state, "dampening", who);
  o.weight_decay = scalar_at(state, "weight_decay", who);
  o.nesterov = flag_at(state, "nesterov", who);
  o.maximize = flag_at(state, "maximize", who);
  check_lr(o.lr, who);
  check_options(o, who);

  // The keys this state must have follow from its own momentum and step counts.
  std::set<std::string> scalar_keys = kHyperKeys;
  std::map<std::string, Shape> tensor_shapes;
  std::vector<std::int64_t> steps(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    scalar_keys.insert(step_key(p));
    steps[i] = count_at(state, step_key(p), who);
    if (steps[i] > 0 && o.momentum != 0.0) tensor_shapes[buffer_key(p)] = p.value.shape();
  }
  check_keys(state, tensor_shapes, scalar_keys, who);

  std::vector<ParamState> loaded(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    loaded[i].step = steps[i];
    const auto it = state.tensors.find(buffer_key(*params_[i]));
    if (it != state.tensors.end()) loaded[i].momentum_buffer = clone(it->second);
  }
  // Nothing below throws.
  state_.swap(loaded);
  options_ = o;
  lr_ = o.lr;
}

}  // namespace mpitrain::nn
