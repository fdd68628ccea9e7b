// AdamW step. Cost per step: one pass over every parameter with a gradient, reading the
// gradient, the value and both moments and writing the value and both moments: about 12
// flops (one sqrt, one division) and 28 bytes of memory traffic per element (36 with
// amsgrad); no allocation after a parameter's first step.
//
// Bitwise agreement with torch 1.13 (_single_tensor_adamw): torch's CPU kernels evaluate
// `a.add_(b, alpha=s)` as fma(b, s, a) and `a.addcmul_(b, c, value=s)` as fma(s*b, c, a)
// (explicit in the vectorised path, contracted by the compiler in its scalar tail), and
// `a.addcdiv_(b, c, value=s)` as a + (s*b)/c, with every scalar first rounded to float32;
// the bias corrections are computed in double (Python floats, libm pow). This file writes
// the same operations in the same order, with std::fma where torch fuses. GCC also fuses a
// plain a*b+c on its own (its C++ default is -ffp-contract=fast, even with -std=c++20), so
// where torch rounds a product before adding it, the product is written
// std::fma(a, b, -0.0): exactly the rounded product for every a and b (adding -0 changes
// nothing, not even the sign of a zero), and not a multiplication the compiler could fuse.

#include "mpitrain/nn/adamw.hpp"

#include <cmath>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>

namespace mpitrain::nn {
namespace {

// std::fma only vectorises where the target has FMA instructions (and std::sqrt only without
// errno, -fno-math-errno); on x86-64 Linux the update is compiled twice and the loader picks
// the FMA version when the CPU has it. Both compute the same correctly rounded results.
// Not under ThreadSanitizer (make sanitize-tsan): the loader runs the clones' resolver
// before TSan's runtime starts, and the instrumented resolver crashes the program.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__)
#define MPITRAIN_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define MPITRAIN_FMA_CLONES
#endif

// The update's scalars for one parameter, rounded to float32 as torch's kernels round them.
struct Scalars {
  float sign;             // -1 to maximize, else 1 (multiplying by +-1 is exact)
  float decay;            // 1 - lr * weight_decay
  float beta1;            // beta1
  float one_minus_beta1;  // 1 - beta1
  float beta2;            // beta2
  float one_minus_beta2;  // 1 - beta2
  float bias2_sqrt;       // sqrt(1 - beta2^t)
  float eps;              // eps
  float neg_step_size;    // -lr / (1 - beta1^t)
};

template <bool kAmsgrad>
[[gnu::always_inline]] inline void update(std::span<float> param, std::span<const float> grad,
                                          std::span<float> exp_avg, std::span<float> exp_avg_sq,
                                          std::span<float> max_exp_avg_sq, const Scalars& s) {
  float* p = param.data();
  const float* g = grad.data();
  float* m = exp_avg.data();
  float* v = exp_avg_sq.data();
  float* vmax = max_exp_avg_sq.data();
  const std::size_t n = param.size();
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i] * s.sign;
    const float decayed = std::fma(p[i], s.decay, -0.0f);  // rounded: added to below
    const float kept_m = m[i] * s.beta1;
    const float mi = std::fma(gi, s.one_minus_beta1, kept_m);
    const float kept_v = v[i] * s.beta2;
    const float scaled_g = s.one_minus_beta2 * gi;
    const float vi = std::fma(scaled_g, gi, kept_v);
    m[i] = mi;
    v[i] = vi;
    float second = vi;
    if constexpr (kAmsgrad) {
      // torch.maximum: NaN if either is NaN.
      const float old = vmax[i];
      second = (vi > old || std::isnan(vi)) ? vi : old;
      vmax[i] = second;
    }
    const float root = std::sqrt(second);
    const float denom = root / s.bias2_sqrt + s.eps;
    const float numer = s.neg_step_size * mi;
    p[i] = decayed + numer / denom;
  }
}

// Applies one AdamW update to `param` from `grad` and the moments (max_exp_avg_sq is empty
// unless amsgrad).
MPITRAIN_FMA_CLONES void update_param(bool amsgrad, std::span<float> param,
                                      std::span<const float> grad, std::span<float> exp_avg,
                                      std::span<float> exp_avg_sq,
                                      std::span<float> max_exp_avg_sq, const Scalars& s) {
  if (amsgrad) {
    update<true>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s);
  } else {
    update<false>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s);
  }
}

// Throws std::invalid_argument for options torch.optim.AdamW rejects.
void check_options(const AdamWOptions& o, std::string_view who) {
  const std::string w(who);
  if (!(o.lr >= 0.0) || !std::isfinite(o.lr)) {
    throw std::invalid_argument(w + ": invalid learning rate " + std::to_string(o.lr));
  }
  if (!(o.eps >= 0.0) || !std::isfinite(o.eps)) {
    throw std::invalid_argument(w + ": invalid epsilon value " + std::to_string(o.eps));
  }
  for (std::size_t i = 0; i < 2; ++i) {
    if (!(o.betas[i] >= 0.0 && o.betas[i] < 1.0)) {
      throw std::invalid_argument(w + ": invalid beta parameter at index " + std::to_string(i) +
                                  ": " + std::to_string(o.betas[i]));
    }
  }
  if (!(o.weight_decay >= 0.0) || !std::isfinite(o.weight_decay)) {
    throw std::invalid_argument(w + ": invalid weight_decay value " +
                                std::to_string(o.weight_decay));
  }
}

const AdamWOptions& checked(const AdamWOptions& o) {
  check_options(o, "AdamW");
  return o;
}

std::string step_key(const Parameter& p) { return p.name + "/step"; }

const std::set<std::string> kHyperKeys = {"lr",           "betas.0", "betas.1", "eps",
                                          "weight_decay", "amsgrad", "maximize"};

}  // namespace

AdamW::AdamW(std::vector<Parameter*> params, const AdamWOptions& options)
    : Optimizer(std::move(params), checked(options).lr), options_(options) {
  state_.resize(params_.size());
}

AdamWOptions AdamW::options() const {
  AdamWOptions o = options_;
  o.lr = lr_;
  return o;
}

void AdamW::step() {
  // Check every gradient before touching any parameter, so a bad one changes nothing.
  for (const Parameter* p : params_) has_grad(*p, "AdamW::step");

  const AdamWOptions options = this->options();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!has_grad(p, "AdamW::step")) continue;
    ParamState& st = state_[i];
    if (st.step == 0) {
      st.exp_avg = Tensor(p.value.shape());
      st.exp_avg_sq = Tensor(p.value.shape());
      if (options_.amsgrad) st.max_exp_avg_sq = Tensor(p.value.shape());
    }
    ++st.step;
    adamw_update(p.value.span(), p.grad.span(), st.exp_avg.span(), st.exp_avg_sq.span(),
                 st.max_exp_avg_sq.span(), options, st.step);
  }
}

void adamw_update(std::span<float> param, std::span<const float> grad,
                  std::span<float> exp_avg, std::span<float> exp_avg_sq,
                  std::span<float> max_exp_avg_sq, const AdamWOptions& options,
                  std::int64_t step) {
  const std::size_t n = param.size();
  if (grad.size() != n || exp_avg.size() != n || exp_avg_sq.size() != n ||
      (options.amsgrad && max_exp_avg_sq.size() != n) || step < 1) {
    throw std::invalid_argument(
        "adamw_update: param has " + std::to_string(n) + " elements, grad " +
        std::to_string(grad.size()) + ", exp_avg " + std::to_string(exp_avg.size()) +
        ", exp_avg_sq " + std::to_string(exp_avg_sq.size()) + ", max_exp_avg_sq " +
        std::to_string(max_exp_avg_sq.size()) + " (amsgrad " + (options.amsgrad ? "on" : "off") +
        "), step " + std::to_string(step) + " (must be >= 1)");
  }
  const double beta1 = options.betas[0];
  const double beta2 = options.betas[1];
  // As torch: Python floats, `beta ** step` with step a float.
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(beta1, t);
  const double bias_correction2 = 1.0 - std::pow(beta2, t);
  const double step_size = options.lr / bias_correction1;
  const Scalars s{options.maximize ? -1.0f : 1.0f,
                  static_cast<float>(1.0 - std::fma(options.lr, options.weight_decay, -0.0)),
                  static_cast<float>(beta1),
                  static_cast<float>(1.0 - beta1),
                  static_cast<float>(beta2),
                  static_cast<float>(1.0 - beta2),
                  static_cast<float>(std::sqrt(bias_correction2)),
                  static_cast<float>(options.eps),
                  static_cast<float>(-step_size)};
  update_param(options.amsgrad, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s);
}

StateDict AdamW::state_dict() const {
  StateDict out;
  out.scalars = {{"lr", lr_},
                 {"betas.0", options_.betas[0]},
                 {"betas.1", options_.betas[1]},
                 {"eps", options_.eps},
                 {"weight_decay", options_.weight_decay},
                 {"amsgrad", options_.amsgrad ? 1.0 : 0.0},
                 {"maximize", options_.maximize ? 1.0 : 0.0}};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    const ParamState& st = state_[i];
    out.scalars[step_key(p)] = static_cast<double>(st.step);
    if (st.step == 0) continue;
    out.tensors[p.name + "/exp_avg"] = clone(st.exp_avg);
    out.tensors[p.name + "/exp_avg_sq"] = clone(st.exp_avg_sq);
    if (options_.amsgrad) out.tensors[p.name + "/max_exp_avg_sq"] = clone(st.max_exp_avg_sq);
  }
  return out;
}

void AdamW::load_state_dict(const StateDict& state) {
  constexpr std::string_view who = "AdamW::load_state_dict";
  AdamWOptions o;
  o.lr = scalar_at(state, "lr", who);
  o.betas = {scalar_at(state, "betas.0", who), scalar_at(state, "betas.1", who)};
  o.eps = scalar_at(state, "eps", who);
  o.weight_decay = scalar_at(state, "weight_decay", who);
  o.amsgrad = flag_at(state, "amsgrad", who);
  o.maximize = flag_at(state, "maximize", who);
  check_options(o, who);

  // The keys this state must have follow from its own amsgrad flag and step counts.
  std::set<std::string> scalar_keys = kHyperKeys;
  std::map<std::string, Shape> tensor_shapes;
  std::vector<std::int64_t> steps(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    scalar_keys.insert(step_key(p));
    steps[i] = count_at(state, step_key(p), who);
    if (steps[i] == 0) continue;
    tensor_shapes[p.name + "/exp_avg"] = p.value.shape();
    tensor_shapes[p.name + "/exp_avg_sq"] = p.value.shape();
    if (o.amsgrad) tensor_shapes[p.name + "/max_exp_avg_sq"] = p.value.shape();
  }
  check_keys(state, tensor_shapes, scalar_keys, who);

  std::vector<ParamState> loaded(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    loaded[i].step = steps[i];
    if (steps[i] == 0) continue;
    loaded[i].exp_avg = clone(state.tensors.at(p.name + "/exp_avg"));
    loaded[i].exp_avg_sq = clone(state.tensors.at(p.name + "/exp_avg_sq"));
    if (o.amsgrad) loaded[i].max_exp_avg_sq = clone(state.tensors.at(p.name + "/max_exp_avg_sq"));
  }
  // Nothing below throws.
  state_.swap(loaded);
  options_ = o;
  lr_ = o.lr;
}

}  // namespace mpitrain::nn
