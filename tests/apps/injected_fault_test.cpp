#include "injected_fault.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "train_config.hpp"

namespace mpitrain::app {
namespace {

TEST(InjectedFault, ParsesKindRankAndStep) {
  const InjectedFault f = parse_injected_fault("throw@1:20");
  EXPECT_EQ(f.kind, "throw");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 20);
  EXPECT_EQ(parse_injected_fault("hang@0:5").kind, "hang");
  EXPECT_EQ(parse_injected_fault("").kind, "");
}

TEST(InjectedFault, BadTextIsAConfigErrorNamingTheOption) {
  for (const std::string text : {"throw", "throw@x:1", "explode@0:1"}) {
    try {
      parse_injected_fault(text);
      ADD_FAILURE() << "no error for " << text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--inject-fault: ", 0), 0u) << e.what();
    }
  }
}

TEST(InjectedFault, ThrowsOnlyOnItsRankAfterItsStep) {
  MpiRuntime runtime;
  const Communicator comm = Communicator::self(runtime);  // rank 0
  EXPECT_NO_THROW(trigger_injected_fault_for_tests(parse_injected_fault("throw@1:20"), comm, 20));
  const InjectedFault f = parse_injected_fault("throw@0:20");
  EXPECT_NO_THROW(trigger_injected_fault_for_tests(f, comm, 19));
  EXPECT_THROW(trigger_injected_fault_for_tests(f, comm, 20), std::runtime_error);
  EXPECT_NO_THROW(trigger_injected_fault_for_tests(InjectedFault{}, comm, -1));
}

// "barrier": one collective the peers do not issue (they skipped it), then training goes on.
TEST(InjectedFault, BarrierIssuesOneCollectiveOnItsRankAfterItsStep) {
  MpiRuntime runtime;
  const Communicator comm = Communicator::self(runtime);
  const InjectedFault f = parse_injected_fault("barrier@0:3");
  EXPECT_EQ(f.kind, "barrier");
  trigger_injected_fault_for_tests(f, comm, 2);
  EXPECT_EQ(comm.collectives_issued(), 0u);
  trigger_injected_fault_for_tests(f, comm, 3);
  EXPECT_EQ(comm.collectives_issued(), 1u);
}

}  // namespace
}  // namespace mpitrain::app
