#pragma once
// TorchModel: data-parallel training of a libtorch model (a torch::nn::Module or a
// torch::jit::Module) and its torch optimizer through an mpitrain::Engine: what PyTorch's
// DistributedDataParallel does for Python, on the Engine's bring-your-own-model path.
// Library target mpitrain::torch (built when libtorch is found, MPITRAIN_TORCH).
//
//   #include <torch/torch.h>
//   #include <mpitrain/torch/torch_model.hpp>
//   mpitrain::Engine engine(config, comm);
//   auto net = std::make_shared<Net>();                        // any torch::nn::Module
//   torch::optim::AdamW opt(mpitrain::libtorch::unique_parameters(*net),   // tied weights once
//                           torch::optim::AdamWOptions(1e-3));
//   mpitrain::libtorch::TorchModel model(engine, *net, opt);   // prepare: after the engine
//   for (...) {                                                // (declared after it)
//     auto micro = engine.accumulate();                        // optional (accumulation)
//     torch::Tensor loss;
//     { auto autocast = model.autocast();                      // bf16 CPU autocast if configured
//       torch::Tensor logits = model.forward(*net, x);         // buffers from rank 0, forward
//       loss = torch::nn::functional::cross_entropy(logits, y); }
//     model.backward(loss);                                    // buckets reduced during backward
//     if (engine.sync_gradients()) engine.clip_grad_norm(1.0); // or engine.clip_grad_value
//     engine.step();                                           // opt.step() (sync steps only)
//     model.zero_grad();                                       // keeps the bucket views
//   }
//   engine.save_state();   engine.load_state();                // parameters, buffers, optimizer
//
// What prepare (the constructor) does, collectively on every rank:
// - Parameters. The model's parameters that require a gradient are registered with
//   Engine::register_parameters once each, in torch's named_parameters() order under their
//   first torch name: a tensor held under several names (tied weights: an embedding and an
//   output layer) is one parameter, reduced once; its other names are aliases(). rank 0's
//   values are broadcast. Each parameter's .grad becomes a view of its slot in the engine's
//   gradient buckets (DDP's gradient_as_bucket_view): torch's AccumulateGrad adds into it in
//   place, and the buckets are reduced with no copy.
// - Readiness. A post hook on each parameter's AccumulateGrad node (the one PyTorch's
//   reducer uses) reports the gradient ready to the engine, so buckets are reduced while
//   backward goes on. AccumulateGrad runs once per backward for a leaf, after every use's
//   contribution was summed, so a tied parameter is reported once, when final.
// - Buffers. The model's buffers (BatchNorm running statistics; fp32, or int64 of one value
//   such as num_batches_tracked) and its frozen parameters (requires_grad false) are
//   registered with Engine::register_buffers: broadcast from rank 0 now and, unless
//   TorchOptions::broadcast_buffers is false, by before_forward() (DDP's broadcast_buffers).
// - Optimizer. An adapter (TorchOptimizer) is given to Engine::set_optimizer: engine.step()
//   steps the torch optimizer after each real (not skipped) synchronised step, and
//   checkpoints hold its state under /optimizer (kind "torch.adamw", "torch.adam",
//   "torch.sgd"). Every parameter of the optimizer must be a parameter of the model, and
//   appear once (unique_parameters()).
// Parameters and buffers must be contiguous CPU tensors (fp32 parameters), and two
// parameters never distinct tensors over the same memory; std::invalid_argument names the
// one that is not (on every rank: the checks are agreed across ranks). Changing the model's
// parameters or buffers after prepare is not seen: prepare again.
//
// Checkpoints (Engine::save_state / load_state, same layout and commit protocol as native
// models, DESIGN.md section 10): /model/<name> every registered parameter (first torch name),
// /buffers/<name> buffers and frozen parameters, /optimizer the torch optimizer's state.
//
// Lifetime: the model, the optimizer and the engine must outlive the TorchModel, and the
// TorchModel must outlive the training (declare it after the engine). Destroying it removes
// the hooks and gives every .grad it bound its own storage again (a copy of the bucket
// values). One TorchModel per engine trains at a time; making another on the same engine and
// model while the first lives (`model = std::make_unique<TorchModel>(...)`) hands the
// gradients, with their values, to the new one, and the first one's end leaves them to it.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpitrain/checkpoint/save_model.hpp"
#include "mpitrain/engine/engine.hpp"

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}
namespace torch::jit {
struct Module;
}
namespace torch::optim {
class Optimizer;
}

namespace mpitrain::libtorch {

class TorchOptimizer;

// Returns the module's parameters with each tensor once (the first of its names), in
// named_parameters() order: what a torch optimizer must be built over when weights are tied
// (module.parameters() lists a shared tensor under each name, and torch's optimizers would
// update it once per appearance; TorchModel refuses such an optimizer).
std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module);

// Returns the TorchScript module's parameters that require a gradient, each tensor once (tied
// weights), in parameters() order: what the trainer and the benchmarks build their torch
// optimizer over.
std::vector<at::Tensor> unique_trained_parameters(const torch::jit::Module& module);

struct TorchOptions {
  // Broadcast the buffers from rank 0 in before_forward() (DDP's broadcast_buffers). They
  // are broadcast once in prepare either way.
  bool broadcast_buffers = true;
  // Step a torch::optim::AdamW with mpitrain's one-pass AdamW kernel (nn::adamw_update) on
  // torch's own state: bit for bit torch's values (tests/torch), 5-10x less time in step()
  // (one pass over parameter, gradient and moments instead of nine, no temporaries). Other
  // optimizers, and tensors that are not contiguous fp32, always take torch's step().
  bool fused_adamw = true;
};

class TorchModel {
 public:
  // Prepares `module` and `optimizer` on `engine` (see the header comment). Collective.
  TorchModel(Engine& engine, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
             TorchOptions options = {});
  TorchModel(Engine& engine, torch::jit::Module& module, torch::optim::Optimizer& optimizer,
             TorchOptions options = {});
  ~TorchModel();
  TorchModel(const TorchModel&) = delete;
  TorchModel& operator=(const TorchModel&) = delete;

  // Call before each forward: broadcasts rank 0's buffers when options().broadcast_buffers
  // (collective then), else does nothing. (libtorch modules have no forward pre-hooks, so
  // this cannot run by itself as in DDP; forward() below calls it.)
  void before_forward();
  // Returns module.forward(args...) after before_forward(): net->forward(x) becomes
  // model.forward(*net, x); a torch::jit::Module takes its std::vector<IValue> inputs.
  template <class Module, class... Args>
  decltype(auto) forward(Module& module, Args&&... args) {
    before_forward();
    return module.forward(std::forward<Args>(args)...);
  }
  // Returns a guard under which libtorch's CPU autocast runs in bf16 when the engine's
  // mixed_precision is bf16, as torch.autocast("cpu"): real bf16 kernels for conv, linear,
  // matmul/mm/bmm/addmm; losses (cross_entropy, nll_loss, ...) in fp32; other ops follow
  // their inputs (relu, softmax of a bf16 tensor stay bf16). Otherwise a guard that does
  // nothing. Run backward outside it. libtorch 1.13's CPU autocast supports bf16 only
  // (set_autocast_cpu_dtype(kHalf) throws "Currently, AutocastCPU only support Bfloat16"):
  // with mixed_precision fp16 the model computes in fp32, and fp16's loss scaling and
  // skipped steps apply.
  class Autocast;
  [[nodiscard]] Autocast autocast() const;
  // Runs the engine's backward for `loss` (a scalar): loss * engine.loss_gradient_scale()
  // (1/(accumulation * world size), times the fp16 loss scale), then loss.backward(). On a
  // synchronising micro-step the buckets are reduced during it; inside no_sync() and on
  // accumulation micro-steps nothing is communicated. Throws std::logic_error (check_grads)
  // when a .grad is no longer a bucket view.
  void backward(const at::Tensor& loss);
  // Zeroes the gradients in place after a synchronising micro-step (Engine::zero_grad), the
  // .grad views kept. A .grad that is no longer a view (torch set it to None, or it was
  // replaced) is first made the view of its bucket slot again.
  void zero_grad();
  // Throws std::logic_error naming `who`, the rank and the first parameter whose .grad is not
  // the view of its bucket slot (undefined: torch set it to None, e.g. module.zero_grad(true);
  // or replaced), saying to call the engine's zero_grad (TorchModel::zero_grad, which binds
  // the views again) or a torch zero_grad that zeroes in place (optimizer.zero_grad(),
  // module.zero_grad(false)).
  void check_grads(std::string_view who) const;

  // Returns every rank's `t` concatenated along dim 0 (rows may differ; the other dimensions
  // must agree, else every rank throws). fp32, fp64, int32 and int64 tensors; a 0-d tensor
  // counts as one row. Collective.
  at::Tensor gather(const at::Tensor& t) const;
  // Returns gather() of the first `real_rows` rows (data::Batch::real_count), so that padding
  // duplicates of an evaluation epoch count once.
  at::Tensor gather_for_metrics(const at::Tensor& t, std::size_t real_rows) const;

  // Collective: the main process writes the weights alone (Engine::save_model's format:
  // model.h5 or model.safetensors): every parameter under each of its torch names (tied ones
  // under all), and the fp32 buffers; int64 counters (num_batches_tracked) are not weights
  // and are left out (torch: load_state_dict(..., strict=False)). Returns the file written.
  std::filesystem::path save_model(const std::filesystem::path& dir,
                                   checkpoint::ModelFormat format = checkpoint::ModelFormat::hdf5);
  // Loads weights from a model.h5 written by save_model (or by h5py with torch names):
  // every registered parameter (under any of its names) and fp32 buffer must be there with
  // its shape; entries the model lacks are an error too. All-or-nothing; not collective
  // (every rank reads the file). Throws std::runtime_error naming the file and the entry.
  void load_model(const std::filesystem::path& file);

  // Returns the registered parameters' names (first torch names), in registration order.
  const std::vector<std::string>& parameter_names() const noexcept { return names_; }
  // Returns the other torch names of shared parameters: alias -> registered name.
  const std::map<std::string, std::string>& aliases() const noexcept { return aliases_; }
  // Returns the names of the registered buffers (buffers, then frozen parameters).
  std::vector<std::string> buffer_names() const;
  // Returns the number of AccumulateGrad post hooks that fired since prepare, per parameter
  // (registration order): one per backward for a parameter used in it, tied or not.
  const std::vector<std::uint64_t>& ready_counts() const noexcept { return ready_counts_; }
  const TorchOptions& options() const noexcept { return options_; }
  Engine& engine() const noexcept { return engine_; }

  class Autocast {
   public:
    Autocast(Autocast&& other) noexcept;
    Autocast& operator=(Autocast&&) = delete;
    ~Autocast();
   private:
    friend class TorchModel;
    explicit Autocast(bool enable);
    bool active_ = false;
    bool was_enabled_ = false;
    std::int8_t was_dtype_ = 0;  // the at::ScalarType before
  };

 private:
  struct Torch;  // the libtorch objects (torch_model.cpp)
  void prepare(torch::optim::Optimizer& optimizer);
  void bind_gradients();
  // Returns the index of the first parameter whose .grad is not the view of its bucket slot.
  std::optional<std::size_t> first_detached_grad() const;
  void install_hooks();

  Engine& engine_;
  TorchOptions options_;
  std::unique_ptr<Torch> torch_;
  std::unique_ptr<TorchOptimizer> optimizer_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> aliases_;
  std::vector<std::uint64_t> ready_counts_;
};

}  // namespace mpitrain::libtorch
