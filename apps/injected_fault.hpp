#pragma once
// InjectedFault: a failure injected on purpose, for tests only. It checks that the job ends
// promptly with a message instead of hanging (`trainer --inject-fault throw|hang@RANK:STEP`,
// tests/apps/trainer_cli_test.py): after optimizer step `step`, rank `rank` throws
// std::runtime_error ("throw"), stops making progress ("hang", the watchdog's case) or issues
// one barrier its peers do not ("barrier": they skipped a collective; the deadline's case).
// Nothing else in the trainer knows about it: the training loop calls
// trigger_injected_fault_for_tests() once per step, which does nothing without a fault.

#include <cstdint>
#include <string>

#include "mpitrain/collectives/communicator.hpp"

namespace mpitrain::app {

struct InjectedFault {
  std::string kind;  // "", "throw", "hang" or "barrier"
  int rank = -1;
  std::int64_t step = -1;
};

// Returns the fault described by "throw@1:20", "hang@0:5" or "barrier@1:3" (empty text: no
// fault); throws ConfigError naming --inject-fault otherwise.
InjectedFault parse_injected_fault(const std::string& text);

// Fails as `fault` says when it is meant for comm.rank() after optimizer step `step`: throws
// std::runtime_error ("throw"), never returns ("hang") or calls comm.barrier() (named
// "injected fault" in the debug mode's reports) and returns. Otherwise returns at once.
void trigger_injected_fault_for_tests(const InjectedFault& fault, const Communicator& comm,
                                      std::int64_t step);

}  // namespace mpitrain::app
