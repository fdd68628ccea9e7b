#include "engine_test_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

namespace mpitrain::testing {

std::vector<float> flatten(const std::vector<nn::Parameter*>& params) {
  std::vector<float> out;
  for (const nn::Parameter* p : params) out.insert(out.end(), p->value.data(), p->value.data() + p->value.numel());
  return out;
}

std::vector<float> flatten_grads(const std::vector<nn::Parameter*>& params) {
  std::vector<float> out;
  for (const nn::Parameter* p : params) out.insert(out.end(), p->grad.data(), p->grad.data() + p->grad.numel());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not be given the null data() of an empty vector (UBSan: nonnull argument).
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_state(const StateDict& a, const StateDict& b) {
  if (a.scalars != b.scalars || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [key, t] : a.tensors) {
    const auto it = b.tensors.find(key);
    if (it == b.tensors.end() || it->second.shape() != t.shape()) return false;
    if (std::memcmp(t.data(), it->second.data(), t.numel() * sizeof(float)) != 0) return false;
  }
  return true;
}

double worst_relative_error(const std::vector<nn::Parameter*>& a, const std::vector<nn::Parameter*>& b) {
  double worst = 0.0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    double diff = 0.0;
    double scale = 0.0;
    for (std::size_t i = 0; i < a[k]->value.numel(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[k]->value[i] - b[k]->value[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[k]->value[i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

bool identical_on_all_ranks(const Communicator& comm, const std::vector<float>& values) {
  std::vector<float> root = values;
  comm.broadcast(std::span<float>(root), 0);
  const int same = same_bits(root, values) ? 1 : 0;
  return comm.allreduce_value(same, ReduceOp::min) == 1;
}

}  // namespace mpitrain::testing
