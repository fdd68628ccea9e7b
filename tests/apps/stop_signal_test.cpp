#include "stop_signal.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace mpitrain::app {
namespace {

// Returns the exit status of a forked child that installs StopSignal, sends `sig` to its own
// process and reports through its exit code: 0 when the flag rose with that signal number
// within 10 s, 1 when it did not, 2 when it rose before any signal was sent.
// A child process is needed because MPI's threads in this test process were started before
// any StopSignal and do not block the signals.
int run_child(int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 1;
    {
      StopSignal stop;
      if (stop.requested()) ::_exit(2);
      ::kill(::getpid(), sig);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < deadline) {
        if (stop.requested()) {
          code = stop.signal_number() == sig ? 0 : 1;
          break;
        }
        std::this_thread::yield();
      }
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(StopSignal, SigtermRaisesTheFlagInsteadOfKilling) {
  const int status = run_child(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << "the process was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignal, Sigusr1RaisesTheFlag) {
  const int status = run_child(SIGUSR1);
  ASSERT_TRUE(WIFEXITED(status)) << "the process was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignal, ALateSignalEndsTheProcessOnceNobodyWatches) {
  // As in the trainer, the signals are blocked before StopSignal exists (its .preinit_array);
  // once StopSignal is gone, SIGTERM must take its default action instead of staying pending.
  const pid_t pid = ::fork();
  if (pid == 0) {
    const sigset_t set = stop_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    { StopSignal stop; }
    ::kill(::getpid(), SIGTERM);
    ::_exit(0);  // reached only when SIGTERM stayed blocked
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status)
                                   << ": SIGTERM stayed blocked";
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace mpitrain::app
