#include "optim_golden.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace mpitrain::nn::testing {
namespace {

// Closes an HDF5 identifier with the matching H5?close on scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw std::runtime_error("HDF5: cannot open " + what);
  }
  ~Handle() { close_(id_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const noexcept { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Returns the extents of `dataset`.
Shape extents(hid_t dataset, const std::string& what) {
  Handle space(H5Dget_space(dataset), H5Sclose, "the dataspace of " + what);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw std::runtime_error("HDF5: H5Sget_simple_extent_ndims failed for " + what);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    throw std::runtime_error("HDF5: H5Sget_simple_extent_dims failed for " + what);
  }
  return Shape(dims.begin(), dims.end());
}

// Returns the dataset `name` flattened, converted to `mem_type`; its shape in *shape_out.
template <typename T>
std::vector<T> read(hid_t file, const std::string& path, const std::string& name, hid_t mem_type,
                    Shape* shape_out) {
  const std::string what = path + ":/" + name;
  Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, what);
  const Shape shape = extents(dataset.get(), what);
  std::vector<T> out(numel(shape));
  if (!out.empty() &&
      H5Dread(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    throw std::runtime_error("HDF5: H5Dread failed for " + what);
  }
  if (shape_out != nullptr) *shape_out = shape;
  return out;
}

// The parameters of every recorded run (make_optim_golden.py's SHAPES).
const std::vector<std::string> kParamNames = {"0.weight", "0.bias", "2.weight"};

}  // namespace

std::string optim_golden_path() { return std::string(MPITRAIN_TEST_DATA_DIR) + "/optim_golden.h5"; }

OptimGoldenFile::OptimGoldenFile(const std::string& path)
    : path_(path), file_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)) {
  if (file_ < 0) throw std::runtime_error("HDF5: H5Fopen failed for " + path);
}

OptimGoldenFile::~OptimGoldenFile() { H5Fclose(static_cast<hid_t>(file_)); }

Tensor OptimGoldenFile::tensor(const std::string& name) const {
  Shape shape;
  const std::vector<float> data =
      read<float>(static_cast<hid_t>(file_), path_, name, H5T_NATIVE_FLOAT, &shape);
  Tensor t(shape);
  std::copy(data.begin(), data.end(), t.data());
  return t;
}

std::vector<double> OptimGoldenFile::doubles(const std::string& name) const {
  return read<double>(static_cast<hid_t>(file_), path_, name, H5T_NATIVE_DOUBLE, nullptr);
}

std::vector<std::uint8_t> OptimGoldenFile::bytes(const std::string& name) const {
  return read<std::uint8_t>(static_cast<hid_t>(file_), path_, name, H5T_NATIVE_UINT8, nullptr);
}

double OptimGoldenFile::attribute(const std::string& object, const std::string& attr) const {
  const std::string what = path_ + ":/" + object + " attribute " + attr;
  Handle a(H5Aopen_by_name(static_cast<hid_t>(file_), object.c_str(), attr.c_str(), H5P_DEFAULT,
                           H5P_DEFAULT),
           H5Aclose, what);
  double value = 0.0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    throw std::runtime_error("HDF5: H5Aread failed for " + what);
  }
  return value;
}

bool OptimGoldenFile::exists(const std::string& name) const {
  // H5Lexists checks one link at a time, so walk the path from the root.
  std::string prefix;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    if (!prefix.empty()) prefix += '/';
    prefix.append(name, start, end - start);
    if (H5Lexists(static_cast<hid_t>(file_), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    start = end + 1;
  }
  return true;
}

GoldenRun read_run(const OptimGoldenFile& file, const std::string& group) {
  GoldenRun run;
  run.group = group;
  run.names = kParamNames;
  run.lr = file.doubles(group + "/lr");
  run.has_grad = file.bytes(group + "/has_grad");
  run.steps = run.lr.size();
  for (const std::string& name : run.names) {
    run.initial.push_back(file.tensor(group + "/initial/" + name));
    run.grads.push_back(file.tensor(group + "/grads/" + name));
    run.values.push_back(file.tensor(group + "/values/" + name));
    if (run.grads.back().dim(0) != run.steps || run.values.back().dim(0) != run.steps) {
      throw std::runtime_error(group + ": step counts of lr, grads and values differ");
    }
  }
  if (run.has_grad.size() != run.steps * run.names.size()) {
    throw std::runtime_error(group + ": has_grad does not have (steps, parameters) values");
  }
  return run;
}

std::vector<Parameter> make_params(const GoldenRun& run) {
  std::vector<Parameter> params;
  for (std::size_t i = 0; i < run.names.size(); ++i) {
    Tensor value = run.initial[i];
    Tensor grad(value.shape());
    params.push_back(Parameter{run.names[i], std::move(value), std::move(grad)});
  }
  return params;
}

std::vector<Parameter*> pointers(std::vector<Parameter>& params) {
  std::vector<Parameter*> out;
  for (Parameter& p : params) out.push_back(&p);
  return out;
}

void set_grads(const GoldenRun& run, std::size_t step, std::vector<Parameter>& params) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter& p = params[i];
    if (run.has_grad[step * params.size() + i] == 0) {
      p.grad = Tensor();
      continue;
    }
    if (p.grad.shape() != p.value.shape()) p.grad = Tensor(p.value.shape());
    const std::size_t n = p.value.numel();
    std::copy_n(run.grads[i].data() + step * n, n, p.grad.data());
  }
}

std::span<const float> values_after(const GoldenRun& run, std::size_t index, std::size_t step) {
  const std::size_t n = run.initial[index].numel();
  return {run.values[index].data() + step * n, n};
}

std::uint64_t max_ulp_distance(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<std::uint64_t>::max();
  // Maps floats to integers that are consecutive for consecutive floats (-0 and +0 both 0).
  auto ordered = [](float x) {
    const auto bits = static_cast<std::int64_t>(std::bit_cast<std::int32_t>(x));
    return bits < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - bits : bits;
  };
  std::uint64_t worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<std::uint64_t>::max();
    const std::int64_t d = ordered(a[i]) - ordered(b[i]);
    worst = std::max(worst, static_cast<std::uint64_t>(d < 0 ? -d : d));
  }
  return worst;
}

void expect_same_state(const StateDict& actual, const StateDict& expected) {
  EXPECT_EQ(actual.scalars, expected.scalars);
  ASSERT_EQ(actual.tensors.size(), expected.tensors.size());
  for (const auto& [key, tensor] : expected.tensors) {
    const auto it = actual.tensors.find(key);
    ASSERT_NE(it, actual.tensors.end()) << "missing tensor " << key;
    ASSERT_EQ(it->second.shape(), tensor.shape()) << key;
    EXPECT_TRUE(std::equal(tensor.data(), tensor.data() + tensor.numel(), it->second.data(),
                           [](float a, float b) {
                             return std::bit_cast<std::uint32_t>(a) ==
                                    std::bit_cast<std::uint32_t>(b);
                           }))
        << key << " differs";
  }
}

void expect_golden_run(const OptimGoldenFile& file, const GoldenRun& run,
                       std::vector<Parameter>& params, Optimizer& opt,
                       const std::vector<std::string>& slots, LrScheduler* scheduler) {
  for (std::size_t step = 0; step < run.steps; ++step) {
    ASSERT_EQ(opt.lr(), run.lr[step]) << run.group << " lr before step " << step + 1;
    set_grads(run, step, params);
    opt.step();
    if (scheduler != nullptr) scheduler->step();
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(max_ulp_distance(params[i].value.span(), values_after(run, i, step)), 0u)
          << run.group << ": " << run.names[i] << " after step " << step + 1;
    }
  }
  const StateDict state = opt.state_dict();
  std::size_t slot_tensors = 0;
  for (const std::string& name : run.names) {
    const std::string recorded = run.group + "/state/" + name;
    EXPECT_EQ(state.scalars.at(name + "/step"), file.attribute(recorded, "step")) << recorded;
    for (const std::string& slot : slots) {
      const std::string key = name + "/" + slot;
      if (!file.exists(recorded + "/" + slot)) {
        EXPECT_FALSE(state.tensors.contains(key)) << key << " exists but torch has none";
        continue;
      }
      ++slot_tensors;
      const Tensor expected = file.tensor(recorded + "/" + slot);
      const auto it = state.tensors.find(key);
      ASSERT_NE(it, state.tensors.end()) << "state dict lacks " << key;
      ASSERT_EQ(it->second.shape(), expected.shape()) << key;
      EXPECT_EQ(max_ulp_distance(it->second.span(), expected.span()), 0u) << key;
    }
  }
  EXPECT_EQ(state.tensors.size(), slot_tensors) << run.group << ": unexpected state tensors";
}

void expect_resumes_exactly(const GoldenRun& run, const OptimizerFactory& make,
                            std::size_t interrupt_at) {
  std::vector<Parameter> straight = make_params(run);
  std::unique_ptr<Optimizer> straight_opt = make(pointers(straight));
  std::vector<Parameter> first = make_params(run);
  std::unique_ptr<Optimizer> first_opt = make(pointers(first));
  for (std::size_t step = 0; step < interrupt_at; ++step) {
    set_grads(run, step, straight);
    straight_opt->step();
    set_grads(run, step, first);
    first_opt->step();
  }
  const StateDict saved = first_opt->state_dict();
  first_opt.reset();

  // A new process: parameters restored from the checkpointed values, a fresh optimizer whose
  // lr differs until the state is loaded.
  std::vector<Parameter> resumed = make_params(run);
  for (std::size_t i = 0; i < resumed.size(); ++i) {
    std::copy_n(first[i].value.data(), first[i].value.numel(), resumed[i].value.data());
  }
  std::unique_ptr<Optimizer> resumed_opt = make(pointers(resumed));
  resumed_opt->set_lr(resumed_opt->lr() * 3.0 + 1.0);
  resumed_opt->load_state_dict(saved);
  EXPECT_EQ(resumed_opt->lr(), straight_opt->lr());
  expect_same_state(resumed_opt->state_dict(), straight_opt->state_dict());

  for (std::size_t step = interrupt_at; step < run.steps; ++step) {
    set_grads(run, step, straight);
    straight_opt->step();
    set_grads(run, step, resumed);
    resumed_opt->step();
  }
  for (std::size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(max_ulp_distance(resumed[i].value.span(), straight[i].value.span()), 0u)
        << run.group << ": " << run.names[i] << " resumed after step " << interrupt_at;
  }
  expect_same_state(resumed_opt->state_dict(), straight_opt->state_dict());
}

void expect_invalid_argument(const std::function<void()>& f,
                             std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no std::invalid_argument thrown";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "message \"" << message << "\" lacks \"" << fragment << "\"";
    }
  }
}

}  // namespace mpitrain::nn::testing
