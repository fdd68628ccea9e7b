// TorchOptimizer: the torch optimizer's state as an nn::Optimizer state dict, and back.
//
// Cost: state_dict() copies every state tensor once (2 P values for Adam/AdamW, P for SGD
// with momentum); load_state_dict() checks every key first, then copies each tensor once.

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>

#include "mpitrain/nn/adamw.hpp"

#include "mpitrain/torch/torch_optimizer.hpp"

namespace mpitrain::libtorch {
namespace {

constexpr std::string_view kWho = "TorchOptimizer::load_state_dict";

// Returns the kind of `o`, or throws std::invalid_argument.
std::string kind_of(torch::optim::Optimizer& o) {
  if (dynamic_cast<torch::optim::AdamW*>(&o) != nullptr) return "torch.adamw";
  if (dynamic_cast<torch::optim::Adam*>(&o) != nullptr) return "torch.adam";
  if (dynamic_cast<torch::optim::SGD*>(&o) != nullptr) return "torch.sgd";
  throw std::invalid_argument(
      "TorchOptimizer: only torch::optim::Adam, AdamW and SGD are supported (their state is "
      "what a checkpoint stores)");
}

// Returns the key of `p` in torch's optimizer state (what torch's optimizers use).
std::string state_key(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

// Returns an owning fp32 copy of `t`.
Tensor to_mpitrain(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(torch::kFloat).contiguous();
  Tensor out(shape_of(c));
  std::copy_n(c.data_ptr<float>(), out.numel(), out.data());
  return out;
}

// Returns a new fp32 torch tensor holding `t`.
at::Tensor to_torch(const Tensor& t) {
  const std::vector<std::int64_t> sizes(t.shape().begin(), t.shape().end());
  at::Tensor out = torch::empty(sizes, torch::kFloat);
  std::copy_n(t.data(), t.numel(), out.data_ptr<float>());
  return out;
}

std::string group_prefix(std::size_t g) { return g == 0 ? "" : "group" + std::to_string(g) + "."; }

std::vector<std::string> hyper_names(const std::string& kind) {
  if (kind == "torch.sgd") return {"lr", "momentum", "dampening", "weight_decay", "nesterov"};
  return {"lr", "betas.0", "betas.1", "eps", "weight_decay", "amsgrad"};
}

// Adam and AdamW have the same options and state, in different types.
template <class Options, class ParamState>
struct AdamLike {
  static void write_options(const torch::optim::OptimizerOptions& options, const std::string& p,
                            StateDict& d) {
    const auto& o = static_cast<const Options&>(options);
    d.scalars[p + "lr"] = o.lr();
    d.scalars[p + "betas.0"] = std::get<0>(o.betas());
    d.scalars[p + "betas.1"] = std::get<1>(o.betas());
    d.scalars[p + "eps"] = o.eps();
    d.scalars[p + "weight_decay"] = o.weight_decay();
    d.scalars[p + "amsgrad"] = o.amsgrad() ? 1.0 : 0.0;
  }
  static void read_options(torch::optim::OptimizerOptions& options, const std::string& p,
                           const StateDict& d) {
    auto& o = static_cast<Options&>(options);
    o.lr(d.scalars.at(p + "lr"));
    o.betas(std::make_tuple(d.scalars.at(p + "betas.0"), d.scalars.at(p + "betas.1")));
    o.eps(d.scalars.at(p + "eps"));
    o.weight_decay(d.scalars.at(p + "weight_decay"));
    o.amsgrad(d.scalars.at(p + "amsgrad") != 0.0);
  }
  static void write_state(const torch::optim::OptimizerParamState& state, const std::string& name,
                          StateDict& d) {
    const auto& s = static_cast<const ParamState&>(state);
    d.scalars[name + "/step"] = static_cast<double>(s.step());
    d.tensors[name + "/exp_avg"] = to_mpitrain(s.exp_avg());
    d.tensors[name + "/exp_avg_sq"] = to_mpitrain(s.exp_avg_sq());
    if (s.max_exp_avg_sq().defined()) d.tensors[name + "/max_exp_avg_sq"] = to_mpitrain(s.max_exp_avg_sq());
  }
  static std::unique_ptr<torch::optim::OptimizerParamState> read_state(const std::string& name,
                                                                      const StateDict& d) {
    auto s = std::make_unique<ParamState>();
    s->step(static_cast<std::int64_t>(d.scalars.at(name + "/step")));
    s->exp_avg(to_torch(d.tensors.at(name + "/exp_avg")));
    s->exp_avg_sq(to_torch(d.tensors.at(name + "/exp_avg_sq")));
    const auto max = d.tensors.find(name + "/max_exp_avg_sq");
    if (max != d.tensors.end()) s->max_exp_avg_sq(to_torch(max->second));
    return s;
  }
};
using AdamW = AdamLike<torch::optim::AdamWOptions, torch::optim::AdamWParamState>;
using Adam = AdamLike<torch::optim::AdamOptions, torch::optim::AdamParamState>;

void write_sgd_options(const torch::optim::OptimizerOptions& options, const std::string& p,
                       StateDict& d) {
  const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
  d.scalars[p + "lr"] = o.lr();
  d.scalars[p + "momentum"] = o.momentum();
  d.scalars[p + "dampening"] = o.dampening();
  d.scalars[p + "weight_decay"] = o.weight_decay();
  d.scalars[p + "nesterov"] = o.nesterov() ? 1.0 : 0.0;
}

void read_sgd_options(torch::optim::OptimizerOptions& options, const std::string& p,
                      const StateDict& d) {
  auto& o = static_cast<torch::optim::SGDOptions&>(options);
  o.lr(d.scalars.at(p + "lr"));
  o.momentum(d.scalars.at(p + "momentum"));
  o.dampening(d.scalars.at(p + "dampening"));
  o.weight_decay(d.scalars.at(p + "weight_decay"));
  o.nesterov(d.scalars.at(p + "nesterov") != 0.0);
}

// Returns whether `t` is a contiguous CPU float32 tensor of `numel` elements.
bool flat_fp32(const at::Tensor& t, std::int64_t numel) {
  return t.defined() && !t.is_sparse() && t.device().is_cpu() && t.scalar_type() == torch::kFloat &&
         t.is_contiguous() && t.numel() == numel;
}

std::span<float> span_of(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

// Returns whether every parameter with a gradient, its gradient and its state (if any) are
// flat fp32 CPU tensors: what the one-pass kernel reads and writes.
bool fusable(torch::optim::Optimizer& o) {
  for (const torch::optim::OptimizerParamGroup& group : o.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!flat_fp32(p, p.numel()) || !flat_fp32(p.grad(), p.numel())) return false;
      const auto it = o.state().find(state_key(p));
      if (it == o.state().end()) continue;
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      const bool amsgrad = static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad();
      if (!flat_fp32(st.exp_avg(), p.numel()) || !flat_fp32(st.exp_avg_sq(), p.numel()) ||
          (amsgrad && !flat_fp32(st.max_exp_avg_sq(), p.numel()))) {
        return false;
      }
    }
  }
  return true;
}

// Steps the torch AdamW `o` with nn::adamw_update, one pass per parameter over its value,
// gradient and moments where torch makes nine (and allocates two temporaries): the same
// values bit for bit, in torch's own state (created as torch creates it, zeros at a
// parameter's first step), so torch's step, its state_dict and ours stay interchangeable.
// Returns false, having changed nothing, when a tensor is not flat fp32 on the CPU.
bool fused_adamw_step(torch::optim::Optimizer& o) {
  if (dynamic_cast<torch::optim::AdamW*>(&o) == nullptr || !fusable(o)) return false;
  torch::NoGradGuard no_grad;
  for (torch::optim::OptimizerParamGroup& group : o.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const nn::AdamWOptions ours{.lr = options.lr(),
                                .betas = {std::get<0>(options.betas()), std::get<1>(options.betas())},
                                .eps = options.eps(),
                                .weight_decay = options.weight_decay(),
                                .amsgrad = options.amsgrad()};
    for (at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = o.state()[state_key(p)];
      if (slot == nullptr) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->exp_avg(torch::zeros_like(p, at::MemoryFormat::Contiguous));
        st->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Contiguous));
        if (ours.amsgrad) st->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Contiguous));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      st.step(st.step() + 1);
      nn::adamw_update(span_of(p), span_of(p.grad()), span_of(st.exp_avg()), span_of(st.exp_avg_sq()),
                       ours.amsgrad ? span_of(st.max_exp_avg_sq()) : std::span<float>{}, ours, st.step());
      torch::autograd::impl::bump_version(p);  // as torch's in-place update does
    }
  }
  return true;
}

double first_lr(torch::optim::Optimizer& o) {
  return o.param_groups().empty() ? 0.0 : o.param_groups().front().options().get_lr();
}

}  // namespace

TorchOptimizer::TorchOptimizer(torch::optim::Optimizer& optimizer,
                               std::unordered_map<const void*, std::string> names, bool fused)
    : nn::Optimizer({}, first_lr(optimizer)), optimizer_(optimizer), names_(std::move(names)),
      kind_(kind_of(optimizer)), fused_(fused) {
  std::set<const void*> seen;
  for (const torch::optim::OptimizerParamGroup& group : optimizer_.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      const auto name = names_.find(p.unsafeGetTensorImpl());
      if (name == names_.end()) {
        throw std::invalid_argument("TorchOptimizer: a parameter of the torch optimizer (shape " +
                                    to_string(shape_of(p)) + ") is not a parameter of the model");
      }
      if (!seen.insert(p.unsafeGetTensorImpl()).second) {
        // torch's optimizers would update it once per appearance.
        throw std::invalid_argument(
            "TorchOptimizer: parameter '" + name->second + "' appears twice in the torch "
            "optimizer, which would update it twice per step (module.parameters() lists a "
            "shared tensor under each of its names): build the optimizer over "
            "mpitrain::libtorch::unique_parameters(module)");
      }
    }
  }
}

std::size_t TorchOptimizer::state_values() const {
  std::size_t values = 0;
  for (const torch::optim::OptimizerParamGroup& group : optimizer_.param_groups()) {
    std::size_t slots = 0;
    if (kind_ == "torch.sgd") {
      slots = static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() != 0.0 ? 1 : 0;
    } else if (kind_ == "torch.adamw") {
      slots = static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad() ? 3 : 2;
    } else {
      slots = static_cast<const torch::optim::AdamOptions&>(group.options()).amsgrad() ? 3 : 2;
    }
    for (const at::Tensor& p : group.params()) values += slots * static_cast<std::size_t>(p.numel());
  }
  return values;
}

void TorchOptimizer::step() {
  last_step_fused_ = fused_ && fused_adamw_step(optimizer_);
  if (!last_step_fused_) optimizer_.step();
}

StateDict TorchOptimizer::state_dict() const {
  StateDict d;
  const auto& groups = optimizer_.param_groups();
  const auto& state = optimizer_.state();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = group_prefix(g);
    if (kind_ == "torch.sgd") write_sgd_options(groups[g].options(), prefix, d);
    if (kind_ == "torch.adamw") AdamW::write_options(groups[g].options(), prefix, d);
    if (kind_ == "torch.adam") Adam::write_options(groups[g].options(), prefix, d);
    for (const at::Tensor& p : groups[g].params()) {
      const auto it = state.find(state_key(p));
      if (it == state.end()) continue;
      const std::string& name = names_.at(p.unsafeGetTensorImpl());
      if (kind_ == "torch.sgd") {
        const auto& s = static_cast<const torch::optim::SGDParamState&>(*it->second);
        if (s.momentum_buffer().defined()) d.tensors[name + "/momentum_buffer"] = to_mpitrain(s.momentum_buffer());
      }
      if (kind_ == "torch.adamw") AdamW::write_state(*it->second, name, d);
      if (kind_ == "torch.adam") Adam::write_state(*it->second, name, d);
    }
  }
  return d;
}

void TorchOptimizer::load_state_dict(const StateDict& state) {
  // 1. The keys `state` must have, from its own hyper-parameters and per-parameter steps.
  auto& groups = optimizer_.param_groups();
  const bool sgd = kind_ == "torch.sgd";
  std::map<std::string, Shape> tensors;
  std::set<std::string> scalars;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = group_prefix(g);
    for (const std::string& h : hyper_names(kind_)) scalars.insert(prefix + h);
    const bool amsgrad = !sgd && flag_at(state, prefix + "amsgrad", kWho);
    for (const at::Tensor& p : groups[g].params()) {
      const std::string& name = names_.at(p.unsafeGetTensorImpl());
      if (sgd) {
        if (state.tensors.count(name + "/momentum_buffer") != 0) tensors[name + "/momentum_buffer"] = shape_of(p);
        continue;
      }
      if (state.scalars.count(name + "/step") == 0) continue;
      static_cast<void>(count_at(state, name + "/step", kWho));
      scalars.insert(name + "/step");
      for (const char* slot : {"/exp_avg", "/exp_avg_sq"}) tensors[name + slot] = shape_of(p);
      if (amsgrad) tensors[name + "/max_exp_avg_sq"] = shape_of(p);
    }
  }
  check_keys(state, tensors, scalars, kWho);
  // 2. Apply.
  auto& live = optimizer_.state();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string prefix = group_prefix(g);
    if (sgd) read_sgd_options(groups[g].options(), prefix, state);
    if (kind_ == "torch.adamw") AdamW::read_options(groups[g].options(), prefix, state);
    if (kind_ == "torch.adam") Adam::read_options(groups[g].options(), prefix, state);
    for (const at::Tensor& p : groups[g].params()) {
      const std::string& name = names_.at(p.unsafeGetTensorImpl());
      const std::string key = state_key(p);
      live.erase(key);
      if (sgd && state.tensors.count(name + "/momentum_buffer") != 0) {
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(to_torch(state.tensors.at(name + "/momentum_buffer")));
        live[key] = std::move(s);
      } else if (!sgd && state.scalars.count(name + "/step") != 0) {
        live[key] = kind_ == "torch.adamw" ? AdamW::read_state(name, state) : Adam::read_state(name, state);
      }
    }
  }
  set_lr(groups.empty() ? 0.0 : groups.front().options().get_lr());
}

}  // namespace mpitrain::libtorch
