// TorchModel's collectives on torch tensors: gather and gather_for_metrics.
//
// Cost: two allgathers of 10 values per rank (dtype and shape check, the counts) and one
// allgatherv moving the tensor's values once.

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "mpitrain/torch/torch_model.hpp"

namespace mpitrain::libtorch {
namespace {

// Returns the rows of every rank's `t` (contiguous, `rows` rows kept) concatenated.
template <class T>
at::Tensor gather_rows(const Engine& engine, const at::Tensor& t, std::int64_t rows) {
  const std::int64_t row_values = t.dim() == 0 ? 1 : (t.size(0) == 0 ? 0 : t.numel() / t.size(0));
  const std::span<const T> values(t.data_ptr<T>(), static_cast<std::size_t>(rows * row_values));
  std::vector<T> all = engine.gather(values);
  std::vector<std::int64_t> sizes = t.dim() == 0 ? std::vector<std::int64_t>{1} : t.sizes().vec();
  sizes[0] = row_values == 0 ? 0 : static_cast<std::int64_t>(all.size()) / row_values;
  at::Tensor out = torch::empty(sizes, t.options());
  std::copy(all.begin(), all.end(), out.data_ptr<T>());
  return out;
}

// Throws std::invalid_argument on every rank unless the ranks' `t` agree in dtype and in
// every dimension but the first (the first 8 of them). Collective.
void check_same_rows(const Engine& engine, const at::Tensor& t, std::string_view who) {
  std::vector<std::int64_t> mine{static_cast<std::int64_t>(t.scalar_type()), t.dim()};
  for (std::int64_t d = 1; d < t.dim(); ++d) mine.push_back(t.size(d));
  mine.resize(10, -1);
  const std::vector<std::int64_t> all = engine.gather(std::span<const std::int64_t>(mine));
  for (std::size_t r = 1; r * mine.size() < all.size(); ++r) {
    const auto block = all.begin() + static_cast<std::ptrdiff_t>(r * mine.size());
    if (!std::equal(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()), block)) {
      throw std::invalid_argument(std::string(who) + ": the ranks' tensors differ in dtype or in a "
                                  "dimension other than the first (rank " + std::to_string(r) +
                                  " and rank 0)");
    }
  }
}

at::Tensor gather_impl(const Engine& engine, const at::Tensor& input, std::int64_t rows,
                       std::string_view who) {
  check_same_rows(engine, input, who);
  const at::Tensor t = input.detach().contiguous();
  switch (t.scalar_type()) {
    case torch::kFloat: return gather_rows<float>(engine, t, rows);
    case torch::kDouble: return gather_rows<double>(engine, t, rows);
    case torch::kInt: return gather_rows<std::int32_t>(engine, t, rows);
    case torch::kLong: return gather_rows<std::int64_t>(engine, t, rows);
    default:
      throw std::invalid_argument(std::string(who) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
                                  " (fp32, fp64, int32 or int64 only)");
  }
}

}  // namespace

at::Tensor TorchModel::gather(const at::Tensor& t) const {
  return gather_impl(engine_, t, t.dim() == 0 ? 1 : t.size(0), "TorchModel::gather");
}

at::Tensor TorchModel::gather_for_metrics(const at::Tensor& t, std::size_t real_rows) const {
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  return gather_impl(engine_, t, std::min<std::int64_t>(rows, static_cast<std::int64_t>(real_rows)),
                     "TorchModel::gather_for_metrics");
}

}  // namespace mpitrain::libtorch
