// TorchModel: prepare (registration with dedupe of tied weights, bucket views, hooks,
// buffers, optimizer), backward and zero_grad, autocast, gather, save_model / load_model.
//
// Cost per synchronising step, P gradient values: the engine's (GradientSync: the buckets
// are reduced in place, torch accumulates into them directly: no copy in or out); one
// pointer check per parameter in backward() and zero_grad(); before_forward() one
// broadcast of the fp32 buffers and one of the int64 ones.

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/rank_agreement.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/precision/precision_mode.hpp"
#include "mpitrain/tensor/tensor.hpp"
#include "mpitrain/torch/torch_model.hpp"
#include "mpitrain/torch/torch_optimizer.hpp"

namespace mpitrain::libtorch {
namespace {

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

// Returns why `t` cannot live in the engine, or "".
std::string tensor_error(const std::string& what, const std::string& name, const at::Tensor& t,
                         bool float_only) {
  if (!t.device().is_cpu() || !t.is_contiguous()) return what + " '" + name + "' is not a contiguous CPU tensor";
  if (t.scalar_type() == torch::kFloat) return "";
  if (!float_only && t.scalar_type() == torch::kLong && t.numel() == 1) return "";
  return what + " '" + name + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
         (float_only ? " (fp32 only)" : " (fp32, or int64 of one value)");
}

void append(std::string& errors, const std::string& e) {
  if (!e.empty()) errors += (errors.empty() ? "" : "; ") + e;
}

// Throws std::invalid_argument on every rank when some rank's `local` error is not empty,
// naming the ranks. Collective.
void agree(const Engine& engine, const std::string& local) {
  const std::vector<std::string> all = engine.communicator().allgather_strings(local);
  std::string message;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) message += (message.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + all[r]);
  }
  if (!message.empty()) throw std::invalid_argument("mpitrain::libtorch::TorchModel: " + message);
}

std::span<float> float_span(const at::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

}  // namespace

std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  std::unordered_map<const void*, bool> seen;
  for (const auto& item : module.named_parameters(true)) {
    if (seen.emplace(item.value().unsafeGetTensorImpl(), true).second) out.push_back(item.value());
  }
  return out;
}

std::vector<at::Tensor> unique_trained_parameters(const torch::jit::Module& module) {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const at::Tensor& p : module.parameters(true)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

struct TorchModel::Torch {
  std::vector<at::Tensor> params;  // registered, in registration order
  std::vector<NamedTensor> every_param;  // every torch name (aliases too), for save/load
  std::vector<NamedTensor> buffers;      // registered buffers, frozen parameters last
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<std::uintptr_t> hook_keys;
  std::vector<at::Tensor> bound;  // the .grad views of the engine's buckets bound by this model
};

TorchModel::TorchModel(Engine& engine, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                       TorchOptions options)
    : engine_(engine), options_(options), torch_(std::make_unique<Torch>()) {
  for (const auto& item : module.named_parameters(true)) torch_->every_param.push_back({item.key(), item.value()});
  for (const auto& item : module.named_buffers(true)) torch_->buffers.push_back({item.key(), item.value()});
  prepare(optimizer);
}

TorchModel::TorchModel(Engine& engine, torch::jit::Module& module, torch::optim::Optimizer& optimizer,
                       TorchOptions options)
    : engine_(engine), options_(options), torch_(std::make_unique<Torch>()) {
  for (const auto& item : module.named_parameters(true)) torch_->every_param.push_back({item.name, item.value});
  for (const auto& item : module.named_buffers(true)) torch_->buffers.push_back({item.name, item.value});
  prepare(optimizer);
}

void TorchModel::prepare(torch::optim::Optimizer& optimizer) {
  // Tied weights: one parameter per TensorImpl, under its first name.
  std::string errors;
  std::unordered_map<const void*, std::string> name_of;
  std::unordered_map<const void*, std::string> name_of_data;
  std::vector<NamedTensor> frozen;
  for (const NamedTensor& p : torch_->every_param) {
    const void* impl = p.tensor.unsafeGetTensorImpl();
    const auto [it, first] = name_of.emplace(impl, p.name);
    if (!first) {
      aliases_[p.name] = it->second;
      continue;
    }
    if (!p.tensor.requires_grad()) {
      frozen.push_back(p);
      continue;
    }
    append(errors, tensor_error("parameter", p.name, p.tensor, true));
    // Two tensors over the same memory with their own gradients cannot share one value.
    const auto [owner, fresh] = name_of_data.emplace(p.tensor.data_ptr(), p.name);
    if (!fresh) {
      append(errors, "parameters '" + owner->second + "' and '" + p.name +
                         "' are different tensors over the same storage (tie them by holding one tensor)");
    }
    names_.push_back(p.name);
    torch_->params.push_back(p.tensor);
  }
  for (const NamedTensor& b : torch_->buffers) append(errors, tensor_error("buffer", b.name, b.tensor, false));
  for (NamedTensor& f : frozen) {
    append(errors, tensor_error("frozen parameter", f.name, f.tensor, true));
    torch_->buffers.push_back(std::move(f));
  }
  try {
    optimizer_ = std::make_unique<TorchOptimizer>(optimizer, name_of, options_.fused_adamw);
  } catch (const std::invalid_argument& e) {
    append(errors, e.what());
  }
  agree(engine_, errors);

  std::vector<ExternalParameter> params;
  for (std::size_t k = 0; k < names_.size(); ++k) {
    params.push_back({names_[k], shape_of(torch_->params[k]), float_span(torch_->params[k]), {}});
  }
  {
    // A gradient may still view the engine's buckets (a TorchModel made earlier on this engine
    // and not yet destroyed): registering frees them, so each gradient takes a copy first.
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : torch_->params) {
      if (p.grad().defined()) p.mutable_grad() = p.grad().clone();
    }
  }
  engine_.register_parameters(std::move(params));
  std::vector<ExternalBuffer> buffers;
  for (const NamedTensor& b : torch_->buffers) {
    ExternalBuffer e{b.name, shape_of(b.tensor), {}, {}};
    if (b.tensor.scalar_type() == torch::kFloat) {
      e.value = float_span(b.tensor);
    } else {
      e.integers = {b.tensor.data_ptr<std::int64_t>(), 1};
    }
    buffers.push_back(std::move(e));
  }
  engine_.register_buffers(std::move(buffers));
  engine_.broadcast_buffers();
  engine_.set_optimizer(*optimizer_);
  bind_gradients();
  install_hooks();
}

void TorchModel::bind_gradients() {
  torch::NoGradGuard no_grad;
  torch_->bound.clear();
  for (std::size_t k = 0; k < names_.size(); ++k) {
    at::Tensor& p = torch_->params[k];
    const std::span<float> slot = engine_.gradient(names_[k]);
    at::Tensor view = torch::from_blob(slot.data(), p.sizes(), torch::TensorOptions().dtype(torch::kFloat));
    // A gradient torch already holds is kept (as the engine keeps a native one's).
    if (p.grad().defined()) view.copy_(p.grad());
    p.mutable_grad() = view;
    torch_->bound.push_back(view);
  }
}

void TorchModel::install_hooks() {
  ready_counts_.assign(names_.size(), 0);
  for (std::size_t k = 0; k < names_.size(); ++k) {
    // Held here: the tensor keeps only a weak reference, and a new accumulator (without the
    // hook) would be made for the next graph once the last graph holding it is freed.
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(torch_->params[k]);
    auto hook = std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          ++ready_counts_[k];
          engine_.grad_ready(k);
          return outputs;
        });
    torch_->hook_keys.push_back(acc->add_post_hook(std::move(hook)));
    torch_->accumulators.push_back(std::move(acc));
  }
}

TorchModel::~TorchModel() {
  for (std::size_t k = 0; k < torch_->accumulators.size(); ++k) {
    torch_->accumulators[k]->del_post_hook(torch_->hook_keys[k]);
  }
  // The bucket storage belongs to the engine: give each gradient this model bound its own
  // copy. One bound since by a later TorchModel on the same parameters is left to that one.
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < torch_->params.size() && k < torch_->bound.size(); ++k) {
    at::Tensor& p = torch_->params[k];
    if (p.grad().defined() && p.grad().is_same(torch_->bound[k])) {
      p.mutable_grad() = p.grad().clone();
    }
  }
}

void TorchModel::before_forward() {
  if (options_.broadcast_buffers) engine_.broadcast_buffers();
}

std::optional<std::size_t> TorchModel::first_detached_grad() const {
  for (std::size_t k = 0; k < names_.size(); ++k) {
    const at::Tensor& g = torch_->params[k].grad();
    const std::span<float> slot = engine_.gradient(names_[k]);
    if (!g.defined() || g.data_ptr() != static_cast<void*>(slot.data()) ||
        g.scalar_type() != torch::kFloat || g.sizes() != torch_->params[k].sizes()) {
      return k;
    }
  }
  return std::nullopt;
}

void TorchModel::check_grads(std::string_view who) const {
  if (const std::optional<std::size_t> detached = first_detached_grad()) {
    const std::size_t k = *detached;
    const at::Tensor& g = torch_->params[k].grad();
    throw std::logic_error(
        std::string(who) + " (rank " + std::to_string(engine_.rank()) + "): the .grad of parameter '" +
        names_[k] + "' is " + (g.defined() ? "no longer" : "undefined (set to None), not") +
        " the view of its slot in the engine's gradient buckets, so it would not be "
        "synchronised. A set-to-none zero_grad (module.zero_grad(true)) or an assignment to "
        ".grad detached it: call the engine's zero_grad (TorchModel::zero_grad), which binds "
        "the views again, and use it, or a torch zero_grad that zeroes in place "
        "(optimizer.zero_grad(), module.zero_grad(false)), from then on");
  }
}

void TorchModel::backward(const at::Tensor& loss) {
  check_grads("TorchModel::backward");
  engine_.backward([this, &loss] { (loss * engine_.loss_gradient_scale()).backward(); });
}

void TorchModel::zero_grad() {
  // A .grad torch set to None or replaced is bound to its slot again; what the slot holds is
  // what zero_grad discards (or, inside an accumulation window, keeps, as the engine does).
  if (first_detached_grad()) bind_gradients();
  engine_.zero_grad();
}

TorchModel::Autocast TorchModel::autocast() const {
  return Autocast(engine_.config().mixed_precision == Precision::bf16);
}

TorchModel::Autocast::Autocast(bool enable) : active_(enable) {
  if (!enable) return;
  was_enabled_ = at::autocast::is_cpu_enabled();
  was_dtype_ = static_cast<std::int8_t>(at::autocast::get_autocast_cpu_dtype());
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::increment_nesting();
}

TorchModel::Autocast::Autocast(Autocast&& other) noexcept
    : active_(other.active_), was_enabled_(other.was_enabled_), was_dtype_(other.was_dtype_) {
  other.active_ = false;
}

TorchModel::Autocast::~Autocast() {
  if (!active_) return;
  // As torch.autocast's exit: the cache of casted weights is dropped with the last guard.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(was_enabled_);
  at::autocast::set_autocast_cpu_dtype(static_cast<at::ScalarType>(was_dtype_));
}

std::filesystem::path TorchModel::save_model(const std::filesystem::path& dir,
                                            checkpoint::ModelFormat format) {
  std::filesystem::path written;
  std::optional<std::string> error;
  if (engine_.is_main_process()) {
    error = checkpoint::capture_error([&] {
      std::map<std::string, Tensor> weights;
      for (const NamedTensor& p : torch_->every_param) {
        weights.emplace(p.name, Tensor::view(float_span(p.tensor), shape_of(p.tensor)));
      }
      for (const NamedTensor& b : torch_->buffers) {
        if (b.tensor.scalar_type() != torch::kFloat) continue;
        weights.emplace(b.name, Tensor::view(float_span(b.tensor), shape_of(b.tensor)));
      }
      std::filesystem::create_directories(dir);
      written = checkpoint::save_model(dir, weights, format);
    });
  }
  const Communicator& comm = engine_.communicator();
  checkpoint::agree_on_success(comm, error, "TorchModel::save_model('" + dir.string() + "')");
  return std::filesystem::path(checkpoint::broadcast_string(comm, written.string(), 0));
}

void TorchModel::load_model(const std::filesystem::path& file) {
  const std::string who = "TorchModel::load_model('" + file.string() + "')";
  const checkpoint::H5File h5 = checkpoint::H5File::open_read_only(file);
  const checkpoint::H5Group root = h5.root();
  // Every fp32 tensor of the model by each of its names; one name of each must be in the file.
  std::map<std::string, at::Tensor> known;
  std::vector<std::vector<std::string>> wanted;  // the names of each target, any one will do
  std::vector<at::Tensor> targets;
  std::map<const void*, std::size_t> target_of;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    known.emplace(name, t);
    const auto [it, first] = target_of.emplace(t.unsafeGetTensorImpl(), targets.size());
    if (first) {
      targets.push_back(t);
      wanted.emplace_back();
    }
    wanted[it->second].push_back(name);
  };
  for (const NamedTensor& p : torch_->every_param) add(p.name, p.tensor);
  for (const NamedTensor& b : torch_->buffers) {
    if (b.tensor.scalar_type() == torch::kFloat) add(b.name, b.tensor);
  }
  for (const std::string& name : root.child_names()) {
    if (known.count(name) == 0) throw std::runtime_error(who + ": '" + name + "' is not a weight of the model");
  }
  std::vector<Tensor> values;
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const auto name = std::find_if(wanted[k].begin(), wanted[k].end(),
                                   [&](const std::string& n) { return root.contains(n); });
    if (name == wanted[k].end()) throw std::runtime_error(who + ": the file has no '" + wanted[k].front() + "'");
    if (root.tensor_shape(*name) != shape_of(targets[k])) {
      throw std::runtime_error(who + ": '" + *name + "' has shape " + to_string(root.tensor_shape(*name)) +
                               ", the model's " + to_string(shape_of(targets[k])));
    }
    values.push_back(root.read_tensor(*name));
  }
  for (std::size_t k = 0; k < targets.size(); ++k) {
    std::copy_n(values[k].data(), values[k].numel(), targets[k].data_ptr<float>());
  }
}

std::vector<std::string> TorchModel::buffer_names() const {
  std::vector<std::string> out;
  for (const NamedTensor& b : torch_->buffers) out.push_back(b.name);
  return out;
}

}  // namespace mpitrain::libtorch
