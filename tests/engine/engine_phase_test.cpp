// EnginePhase's transition table: every legal transition and the phase it leads to, the
// synchronisation decision (window, loader end, no_sync), the step boundary, and every
// illegal call throwing std::logic_error that names the caller and the current phase.
#include "mpitrain/engine/engine_phase.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace mpitrain {
namespace {

using Micro = EnginePhase::MicroStep;
using Grads = EnginePhase::Gradients;

// Returns the message of the std::logic_error `f` throws ("" if none).
template <class F>
std::string logic_error_of(F&& f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "";
}

// Runs one implicit micro-step (backward without accumulate()) and returns whether it
// synchronised.
bool implicit_micro_step(EnginePhase& phase, bool loader_end = false) {
  EXPECT_TRUE(phase.start_backward("test", loader_end));
  const bool sync = phase.sync_gradients();
  if (sync) phase.backward_synchronised("test");
  phase.close_micro_step();
  return sync;
}

TEST(EnginePhaseTest, StartsClosedLocalAtTheStepBoundary) {
  const EnginePhase phase(1);
  EXPECT_EQ(phase.micro_step(), Micro::closed);
  EXPECT_EQ(phase.gradients(), Grads::local);
  EXPECT_TRUE(phase.at_step_boundary());
  EXPECT_FALSE(phase.step_pending());
  EXPECT_TRUE(phase.sync_gradients());
  EXPECT_EQ(phase.window(), 0u);
}

TEST(EnginePhaseTest, ExplicitMicroStepOpensRunsBackwardAndCloses) {
  EnginePhase phase(1);
  phase.open_micro_step("test", false);
  EXPECT_EQ(phase.micro_step(), Micro::open);
  EXPECT_TRUE(phase.micro_step_open());
  EXPECT_FALSE(phase.open_micro_step_done());
  EXPECT_FALSE(phase.at_step_boundary());
  EXPECT_FALSE(phase.start_backward("test", false));  // the micro-step was open already
  EXPECT_EQ(phase.micro_step(), Micro::backward_done);
  EXPECT_TRUE(phase.open_micro_step_done());
  phase.backward_synchronised("test");
  EXPECT_EQ(phase.gradients(), Grads::synchronised);
  EXPECT_TRUE(phase.step_pending());
  EXPECT_FALSE(phase.at_step_boundary());
  EXPECT_TRUE(phase.take_step());
  EXPECT_EQ(phase.gradients(), Grads::local);
  EXPECT_TRUE(phase.at_step_boundary());  // stepped inside the open micro-step
  phase.close_micro_step();
  EXPECT_EQ(phase.micro_step(), Micro::closed);
  EXPECT_TRUE(phase.at_step_boundary());
}

TEST(EnginePhaseTest, TheWindowSynchronisesEveryAccumulationStepsMicroSteps) {
  EnginePhase phase(3);
  EXPECT_FALSE(implicit_micro_step(phase));
  EXPECT_EQ(phase.window(), 1u);
  EXPECT_FALSE(phase.at_step_boundary());
  EXPECT_FALSE(phase.take_step());  // nothing pending: step() does nothing
  EXPECT_FALSE(implicit_micro_step(phase));
  EXPECT_EQ(phase.window(), 2u);
  EXPECT_EQ(phase.accumulated_micro_steps(), 2u);
  EXPECT_TRUE(implicit_micro_step(phase));
  EXPECT_EQ(phase.window(), 0u);
  EXPECT_TRUE(phase.step_pending());
  EXPECT_TRUE(phase.take_step());
  EXPECT_TRUE(phase.at_step_boundary());
}

TEST(EnginePhaseTest, TheLoaderEndSynchronisesEarlyAndNoSyncNeverSynchronises) {
  EnginePhase phase(4);
  EXPECT_TRUE(implicit_micro_step(phase, true));
  EXPECT_TRUE(phase.take_step());
  phase.enter_no_sync();
  phase.enter_no_sync();
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(implicit_micro_step(phase, true));
  phase.leave_no_sync();
  EXPECT_FALSE(implicit_micro_step(phase, true));
  phase.leave_no_sync();
  EXPECT_EQ(phase.window(), 6u);
  EXPECT_TRUE(implicit_micro_step(phase));
}

TEST(EnginePhaseTest, CheckingTheGradientsUnscalesThemUntilTheStep) {
  EnginePhase phase(1);
  implicit_micro_step(phase);
  phase.gradients_checked("test", false);
  EXPECT_EQ(phase.gradients(), Grads::unscaled);
  EXPECT_TRUE(phase.unscaled());
  EXPECT_FALSE(phase.finite());
  EXPECT_TRUE(phase.step_pending());
  phase.gradients_checked("test", true);  // clip_grad_norm after unscale_and_check
  EXPECT_TRUE(phase.finite());
  EXPECT_TRUE(phase.take_step());
  phase.record_step(true);
  EXPECT_TRUE(phase.last_step_skipped());
  EXPECT_FALSE(phase.unscaled());
  implicit_micro_step(phase);
  EXPECT_EQ(phase.gradients(), Grads::synchronised);
  EXPECT_TRUE(phase.finite());  // a new synchronisation forgets the last check
}

TEST(EnginePhaseTest, RestartingTheWindowReturnsToTheStepBoundary) {
  EnginePhase phase(2);
  implicit_micro_step(phase);
  EXPECT_EQ(phase.window(), 1u);
  phase.restart_window();
  EXPECT_TRUE(phase.at_step_boundary());
  implicit_micro_step(phase);
  implicit_micro_step(phase);
  EXPECT_TRUE(phase.step_pending());
  phase.restart_window();
  EXPECT_FALSE(phase.step_pending());
  EXPECT_TRUE(phase.at_step_boundary());
}

TEST(EnginePhaseTest, IllegalCallsNameTheCallerAndThePhase) {
  EnginePhase phase(2);
  phase.open_micro_step("test", false);
  EXPECT_EQ(logic_error_of([&] { phase.open_micro_step("Engine::accumulate", false); }),
            "Engine::accumulate: a micro-step is already open (engine phase: micro-step open, "
            "gradients local, 0 micro-step(s) accumulated)");
  phase.start_backward("test", false);
  const std::string twice = logic_error_of([&] { phase.start_backward("Engine::backward", false); });
  EXPECT_EQ(twice.rfind("Engine::backward: one backward per accumulate() micro-step", 0), 0u) << twice;
  EXPECT_NE(twice.find("engine phase: micro-step open, backward done"), std::string::npos) << twice;
  EXPECT_NE(logic_error_of([&] { phase.backward_synchronised("sync"); })
                .find("sync: gradients synchronised outside a synchronising backward"),
            std::string::npos);  // the first micro-step of 2 does not synchronise
  EXPECT_NE(logic_error_of([&] { phase.gradients_checked("check", true); })
                .find("check: no synchronised gradients to check (engine phase: "),
            std::string::npos);
  phase.close_micro_step();
  phase.enter_no_sync();
  EXPECT_NE(logic_error_of([&] { phase.gradients_checked("check", true); }).find(", inside no_sync()"),
            std::string::npos);
  EXPECT_NE(phase.describe().find("1 micro-step(s) accumulated"), std::string::npos) << phase.describe();
}

}  // namespace
}  // namespace mpitrain
