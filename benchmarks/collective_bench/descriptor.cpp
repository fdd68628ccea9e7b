#include "descriptor.hpp"

#include <stdexcept>

namespace mpitrain::bench {

std::vector<AlgorithmName> table_algorithms(Collective op) {
  std::vector<AlgorithmName> names;
  for (std::string_view name : algorithm_names(op)) names.push_back({std::string(name)});
  return names;
}

}  // namespace mpitrain::bench
