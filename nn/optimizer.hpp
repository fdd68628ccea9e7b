#pragma once
// Optimizer: updates parameters in place from their gradients, with torch.optim semantics
// (one parameter group).
//
// Gradients are read from `Parameter::grad` at the time of each step(), never cached: the
// engine may rebind them to its communication buckets between steps. A parameter whose
// gradient is empty (while its value is not) has no gradient, like a torch parameter whose
// .grad is None: step() skips it and creates no state for it.
//
// State dicts: tensors "<param name>/<slot>", scalars for hyper-parameters (by torch's names,
// "betas.0" for betas[0]; booleans as 0/1) and one "<param name>/step" per parameter, the
// number of steps that updated it. Slots are created lazily, as torch does: a parameter
// with step 0 has no slot tensors (torch has no entry for it in optimizer.state), so the
// exact set of keys a state dict must have follows from its own scalars.
// load_state_dict is all-or-nothing: every key and shape is checked before anything
// changes, and on error (std::invalid_argument naming the key and the shapes) the
// optimizer's state is untouched.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/nn/parameter.hpp"
#include "mpitrain/tensor/state_dict.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn {

class Optimizer {
 public:
  // Throws std::invalid_argument if a pointer is null, two parameters share a name, or lr
  // is negative or not finite. The parameters must outlive the optimizer.
  Optimizer(std::vector<Parameter*> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient. Throws std::invalid_argument
  // (before changing anything) if a non-empty gradient's shape differs from its value's.
  virtual void step() = 0;
  // Sets every gradient to zero in place (rebound gradients stay views).
  void zero_grad() noexcept;

  // Returns the learning rate the next step() uses.
  double lr() const noexcept { return lr_; }
  // Sets the learning rate (schedulers and the engine call this); throws
  // std::invalid_argument if it is negative or not finite.
  void set_lr(double lr);

  // Returns the parameters in construction order.
  const std::vector<Parameter*>& parameters() const noexcept { return params_; }
  // Returns "sgd" or "adamw".
  virtual std::string kind() const = 0;
  // Returns the fp32 state values kept per parameter value once it has stepped (AdamW 2,
  // 3 with amsgrad; SGD 1 with momentum, else 0); for memory reports.
  virtual std::size_t slots_per_value() const { return 0; }
  // Returns the fp32 state values this optimizer holds once every parameter has stepped:
  // slots_per_value() per value of parameters(), unless an optimizer that holds other
  // tensors (mpitrain::torch's adapter) counts its own.
  virtual std::size_t state_values() const;
  // Returns a new optimizer of the same kind with the same hyper-parameters (the current
  // learning rate included) over `params`, without any state; null for a kind that cannot.
  // The engine's ZeRO stage 1 steps such a copy over this rank's pieces of the parameters
  // (element-wise updates: a piece is updated exactly as inside its whole parameter).
  virtual std::unique_ptr<Optimizer> fresh_copy(std::vector<Parameter*> params) const {
    (void)params;
    return nullptr;
  }

  // Returns a deep copy of the state (see the header comment for the keys).
  virtual StateDict state_dict() const = 0;
  // Replaces the state and hyper-parameters (lr included) by `state`, or throws
  // std::invalid_argument and changes nothing.
  virtual void load_state_dict(const StateDict& state) = 0;

 protected:
  // Returns true if `p` has a gradient to apply this step; throws std::invalid_argument
  // naming `who` if that gradient's shape differs from the value's.
  static bool has_grad(const Parameter& p, std::string_view who);
  // Returns a freshly allocated owning copy of `t` (copying a view would copy the view).
  static Tensor clone(const Tensor& t);

  // Returns state.scalars[key]; throws std::invalid_argument naming `who` and the key if it
  // is missing or, for the checked variants, not a valid count (integer >= 0) / flag (0, 1).
  static double scalar_at(const StateDict& state, const std::string& key, std::string_view who);
  static std::int64_t count_at(const StateDict& state, const std::string& key,
                               std::string_view who);
  static bool flag_at(const StateDict& state, const std::string& key, std::string_view who);
  // Throws std::invalid_argument naming `who` and the first offending key unless `state`
  // has exactly the tensor keys of `tensors`, each with its shape, and exactly the scalar
  // keys `scalars`.
  static void check_keys(const StateDict& state, const std::map<std::string, Shape>& tensors,
                         const std::set<std::string>& scalars, std::string_view who);

  // Hyper-parameter checks shared by the optimizers (torch's constructor checks).
  static void check_lr(double lr, std::string_view who);

  std::vector<Parameter*> params_;
  double lr_;
};

}  // namespace mpitrain::nn
