#include "descriptor.hpp"

#include <stdexcept>

namespace mpitrain::bench {

std::vector<AlgorithmName> mpi_call_only() { return {{"default", false}, {"mpi", true}}; }

Runner mpi_call_only_runner(const std::string& algo, Runner call) {
  std::string valid;
  for (const AlgorithmName& a : mpi_call_only()) {
    if (a.name == algo) return call;
    valid += (valid.empty() ? "" : ", ") + a.name;
  }
  throw std::invalid_argument("unknown algorithm '" + algo + "' (valid: " + valid + ")");
}

}  // namespace mpitrain::bench
