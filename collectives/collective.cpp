// Collective names, and the algorithm names each collective accepts (from the table).

#include "mpitrain/collectives/collective.hpp"

#include <array>
#include <stdexcept>
#include <string>

#include "mpitrain/collectives/detail/algorithm_registry.hpp"

namespace mpitrain {
namespace {

constexpr std::array<Collective, 7> kCollectives = {
    Collective::barrier,   Collective::broadcast,  Collective::allreduce, Collective::reduce_scatter,
    Collective::allgather, Collective::allgatherv, Collective::gather};

// Returns "a, b, c".
std::string joined(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

std::string_view to_string(Collective op) noexcept {
  switch (op) {
    case Collective::barrier: return "barrier";
    case Collective::broadcast: return "broadcast";
    case Collective::allreduce: return "allreduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::allgather: return "allgather";
    case Collective::allgatherv: return "allgatherv";
    case Collective::gather: return "gather";
  }
  return "unknown";
}

Collective parse_collective(std::string_view name) {
  std::vector<std::string_view> names;
  for (Collective c : kCollectives) {
    if (to_string(c) == name) return c;
    names.push_back(to_string(c));
  }
  throw std::invalid_argument("unknown collective '" + std::string(name) +
                              "' (valid: " + joined(names) + ")");
}

std::vector<std::string_view> algorithm_names(Collective op) {
  std::vector<std::string_view> names{kDefaultAlgorithm};
  for (const detail::Algorithm* a : detail::algorithms()) {
    if (a->implements(op)) names.push_back(a->name());
  }
  return names;
}

void require_algorithm(Collective op, std::string_view name) {
  if (name == kDefaultAlgorithm || detail::find_algorithm(op, name) != nullptr) return;
  throw std::invalid_argument("unknown " + std::string(to_string(op)) + " algorithm '" +
                              std::string(name) + "' (valid: " + joined(algorithm_names(op)) +
                              ")");
}

}  // namespace mpitrain
