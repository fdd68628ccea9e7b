// TimeoutAction names (see collective_timeout.hpp).

#include "mpitrain/collectives/collective_timeout.hpp"

#include <stdexcept>
#include <string>

namespace mpitrain {

std::string_view to_string(TimeoutAction action) noexcept {
  return action == TimeoutAction::abort ? "abort" : "throw";
}

TimeoutAction parse_timeout_action(std::string_view name) {
  if (name == "abort") return TimeoutAction::abort;
  if (name == "throw") return TimeoutAction::throw_error;
  throw std::invalid_argument("unknown timeout action '" + std::string(name) +
                              "' (valid: abort, throw)");
}

}  // namespace mpitrain
