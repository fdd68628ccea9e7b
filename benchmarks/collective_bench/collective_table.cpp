#include "collective_table.hpp"

#include <stdexcept>

namespace mpitrain::bench {
namespace {

struct Collective {
  std::string_view name;
  std::unique_ptr<CollectiveDescriptor> (*make)();
};

// Adding a collective: its descriptor file and one line here.
constexpr Collective kCollectives[] = {
    {"allreduce", make_allreduce_descriptor},
    {"reduce_scatter", make_reduce_scatter_descriptor},
    {"allgather", make_allgather_descriptor},
    {"broadcast", make_broadcast_descriptor},
};

}  // namespace

std::string collective_names(std::string_view separator) {
  std::string names;
  for (const Collective& c : kCollectives) {
    if (!names.empty()) names += separator;
    names += c.name;
  }
  return names;
}

std::unique_ptr<CollectiveDescriptor> make_descriptor(std::string_view op) {
  for (const Collective& c : kCollectives) {
    if (c.name == op) return c.make();
  }
  throw std::invalid_argument("unknown collective '" + std::string(op) + "' (valid: " +
                              collective_names(", ") + ")");
}

std::string algorithm_names_by_collective() {
  std::string text;
  for (const Collective& c : kCollectives) {
    if (!text.empty()) text += "; ";
    text += std::string(c.name) + ":";
    const char* separator = " ";
    for (const AlgorithmName& a : c.make()->algorithms()) {
      text += separator + a.name;
      separator = ", ";
    }
  }
  return text;
}

}  // namespace mpitrain::bench
