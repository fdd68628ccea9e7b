#pragma once
// Test support for the optimizer and scheduler tests: reads tests/nn/golden/optim_golden.h5
// (written by make_optim_golden.py) and compares floats in units in the last place.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/optimizer.hpp"
#include "mpitrain/nn/parameter.hpp"
#include "mpitrain/tensor/state_dict.hpp"
#include "mpitrain/tensor/tensor.hpp"

namespace mpitrain::nn::testing {

// Returns the path of tests/nn/golden/optim_golden.h5 (MPITRAIN_TEST_DATA_DIR from CMake).
std::string optim_golden_path();

// A read-only HDF5 file of golden data (RAII: closed by the destructor).
class OptimGoldenFile {
 public:
  // Opens `path`; throws std::runtime_error naming it.
  explicit OptimGoldenFile(const std::string& path);
  ~OptimGoldenFile();
  OptimGoldenFile(const OptimGoldenFile&) = delete;
  OptimGoldenFile& operator=(const OptimGoldenFile&) = delete;

  // Returns the dataset `name` as float32 of its shape; throws std::runtime_error if absent.
  Tensor tensor(const std::string& name) const;
  // Returns the dataset `name` flattened, converted to double / uint8.
  std::vector<double> doubles(const std::string& name) const;
  std::vector<std::uint8_t> bytes(const std::string& name) const;
  // Returns the numeric attribute `attr` of the object `object` ("sgd/plain"), as double.
  double attribute(const std::string& object, const std::string& attr) const;
  // Returns true if the file holds an object at path `name`.
  bool exists(const std::string& name) const;

 private:
  std::string path_;
  std::int64_t file_;  // hid_t, kept out of this header
};

// One recorded optimizer run: the group /sgd/<config> or /adamw/<config>.
struct GoldenRun {
  std::string group;
  std::vector<std::string> names;       // parameter names, in optimizer order
  std::vector<Tensor> initial;          // per parameter: shape
  std::vector<Tensor> grads;            // per parameter: (steps, *shape)
  std::vector<Tensor> values;           // per parameter: (steps, *shape), after each step
  std::vector<double> lr;               // (steps,) lr set before each step
  std::vector<std::uint8_t> has_grad;   // (steps, parameters) row-major
  std::size_t steps = 0;
};

// Returns the run stored in `group`.
GoldenRun read_run(const OptimGoldenFile& file, const std::string& group);

// Returns parameters named and initialised as in `run`, with zero gradients.
std::vector<Parameter> make_params(const GoldenRun& run);
// Returns pointers to `params`, for an optimizer.
std::vector<Parameter*> pointers(std::vector<Parameter>& params);
// Sets every parameter's gradient to the recorded one of step `step` (an empty tensor where
// torch's .grad was None).
void set_grads(const GoldenRun& run, std::size_t step, std::vector<Parameter>& params);
// Returns the recorded values of parameter `index` after step `step` (0-based).
std::span<const float> values_after(const GoldenRun& run, std::size_t index, std::size_t step);

// Returns the largest distance between a[i] and b[i] in units in the last place (0 when
// bitwise equal, +0 and -0 count as equal); SIZE_MAX if the sizes differ or a NaN appears.
std::uint64_t max_ulp_distance(std::span<const float> a, std::span<const float> b);

// GoogleTest expectations shared by the optimizer tests.

// Expects the same keys, equal scalars, and tensors of the same shapes with bitwise equal
// values.
void expect_same_state(const StateDict& actual, const StateDict& expected);

// Steps `opt` (over `params`, made by make_params(run)) through every recorded step of `run`
// and expects, bit for bit: the recorded lr before each step (set by `scheduler` when given,
// which is stepped after each optimizer step), the recorded values after each step, and the
// recorded final state: per-parameter step counts and the tensors of `slots`.
void expect_golden_run(const OptimGoldenFile& file, const GoldenRun& run,
                       std::vector<Parameter>& params, Optimizer& opt,
                       const std::vector<std::string>& slots, LrScheduler* scheduler = nullptr);

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<Parameter*>)>;

// Expects that saving the state after `interrupt_at` steps of `run`, loading it into a fresh
// optimizer (from `make`, over copies of the parameters' values) and continuing gives
// bitwise the same values and state as running uninterrupted.
void expect_resumes_exactly(const GoldenRun& run, const OptimizerFactory& make,
                            std::size_t interrupt_at);

// Expects `f` to throw std::invalid_argument whose message contains every one of `fragments`.
void expect_invalid_argument(const std::function<void()>& f,
                             std::initializer_list<std::string> fragments);

}  // namespace mpitrain::nn::testing
