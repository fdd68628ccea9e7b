#include "injected_fault.hpp"

#include <chrono>
#include <stdexcept>
#include <thread>

#include "train_config.hpp"

namespace mpitrain::app {

InjectedFault parse_injected_fault(const std::string& text) {
  InjectedFault f;
  if (text.empty()) return f;
  const auto at = text.find('@');
  const auto colon = text.find(':', at == std::string::npos ? 0 : at);
  try {
    if (at == std::string::npos || colon == std::string::npos) throw std::invalid_argument(text);
    f.kind = text.substr(0, at);
    f.rank = std::stoi(text.substr(at + 1, colon - at - 1));
    f.step = std::stoll(text.substr(colon + 1));
  } catch (const std::exception&) {
    throw ConfigError("--inject-fault: expected throw@RANK:STEP, hang@RANK:STEP or barrier@RANK:STEP, got '" +
                      text + "'");
  }
  if (f.kind != "throw" && f.kind != "hang" && f.kind != "barrier") {
    throw ConfigError("--inject-fault: the kind must be throw, hang or barrier, not '" + f.kind + "'");
  }
  return f;
}

void trigger_injected_fault_for_tests(const InjectedFault& fault, const Communicator& comm,
                                      std::int64_t step) {
  if (fault.kind.empty() || fault.rank != comm.rank() || fault.step != step) return;
  if (fault.kind == "throw") {
    throw std::runtime_error("injected fault after step " + std::to_string(step));
  }
  if (fault.kind == "barrier") {
    const Communicator::CallSite site(comm, "injected fault");
    comm.barrier();
    return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // "hang": the watchdog's case
}

}  // namespace mpitrain::app
