#pragma once
// InjectedFault: a failure injected on purpose, for tests only. It checks that the job ends
// promptly with a message instead of hanging (`trainer --inject-fault throw|hang@RANK:STEP`,
// tests/apps/trainer_cli_test.py): after optimizer step `step`, rank `rank` throws
// std::runtime_error ("throw") or stops making progress ("hang", the watchdog's case).
// Nothing else in the trainer knows about it: the training loop calls
// trigger_injected_fault_for_tests() once per step, which does nothing without a fault.

#include <cstdint>
#include <string>

namespace mpitrain::app {

struct InjectedFault {
  std::string kind;  // "", "throw" or "hang"
  int rank = -1;
  std::int64_t step = -1;
};

// Returns the fault described by "throw@1:20" or "hang@0:5" (empty text: no fault); throws
// ConfigError naming --inject-fault otherwise.
InjectedFault parse_injected_fault(const std::string& text);

// Fails as `fault` says when it is meant for `rank` after optimizer step `step`: throws
// std::runtime_error ("throw") or never returns ("hang"). Otherwise returns at once.
void trigger_injected_fault_for_tests(const InjectedFault& fault, int rank, std::int64_t step);

}  // namespace mpitrain::app
