// CommStream: issue order, results of collectives run by the worker, failure propagation,
// draining and cancelling on shutdown, and no CPU use while idle.

#include "mpitrain/collectives/comm_stream.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace mpitrain {
namespace {

class CommStreamTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;  // adopts the MPI the test main initialised
  Communicator comm_{runtime_};
};

TEST_F(CommStreamTest, RunsTasksInIssueOrder) {
  CommStream stream(comm_);
  std::vector<int> order;  // written only by the worker; read after synchronize()
  for (int i = 0; i < 200; ++i) {
    stream.submit([&order, i](const Communicator&) { order.push_back(i); });
  }
  stream.synchronize();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(stream.tasks_finished(), 200u);
  EXPECT_EQ(stream.tasks_in_flight(), 0u);
}

TEST_F(CommStreamTest, CollectivesInFlightGiveClosedFormSums) {
  // Buffers of distinct sizes: a rank that issued them in another order would mismatch.
  const std::vector<std::size_t> counts = {0, 1, 7, 1000, 33, 65536, 5, 4097};
  const int n = comm_.size();
  const int r = comm_.rank();
  std::vector<std::vector<float>> buffers;
  for (std::size_t count : counts) {
    std::vector<float> b(count);
    for (std::size_t i = 0; i < count; ++i) b[i] = static_cast<float>(r + 1) * static_cast<float>(i % 97);
    buffers.push_back(std::move(b));
  }
  CommStream stream(comm_);
  std::vector<CommFuture> futures;
  for (auto& b : buffers) {
    futures.push_back(stream.submit([&b](const Communicator& c) {
      c.allreduce(std::span<float>(b), ReduceOp::sum);
    }));
  }
  for (const CommFuture& f : futures) f.wait();
  // sum over ranks of (r + 1) * (i % 97) = n (n + 1) / 2 * (i % 97): small integers, exact.
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (std::size_t k = 0; k < counts.size(); ++k) {
    for (std::size_t i = 0; i < counts[k]; ++i) {
      ASSERT_EQ(buffers[k][i], ranks_sum * static_cast<float>(i % 97))
          << "buffer " << k << " element " << i;
    }
  }
  EXPECT_TRUE(futures.back().ready());
}

TEST_F(CommStreamTest, MainThreadMayUseTheCommunicatorWhenTheStreamIsIdle) {
  CommStream stream(comm_);
  std::vector<int> value{comm_.rank()};
  stream.submit([&value](const Communicator& c) { c.allreduce(std::span<int>(value), ReduceOp::max); });
  stream.synchronize();
  EXPECT_EQ(value[0], comm_.size() - 1);
  EXPECT_EQ(comm_.allreduce_value(1, ReduceOp::sum), comm_.size());
}

TEST_F(CommStreamTest, TaskExceptionReachesItsFutureAndStopsLaterTasks) {
  CommStream stream(comm_);
  const std::string message = "boom on rank " + std::to_string(comm_.rank());
  bool later_ran = false;
  CommFuture ok = stream.submit([](const Communicator&) {});
  CommFuture bad = stream.submit([&message](const Communicator&) { throw std::out_of_range(message); });
  CommFuture later = stream.submit([&later_ran](const Communicator&) { later_ran = true; });

  EXPECT_NO_THROW(ok.wait());
  for (int repeat = 0; repeat < 2; ++repeat) {  // the exception is kept for every wait()
    try {
      bad.wait();
      ADD_FAILURE() << "wait() did not rethrow";
    } catch (const std::out_of_range& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  try {
    later.wait();
    ADD_FAILURE() << "a task after a failure ran";
  } catch (const CommStreamError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  EXPECT_THROW(stream.synchronize(), std::out_of_range);
  EXPECT_TRUE(stream.failed());
  EXPECT_FALSE(later_ran);
  // Submitting after the failure is allowed; the task is reported as not run.
  EXPECT_THROW(stream.submit([](const Communicator&) {}).wait(), CommStreamError);
}

TEST_F(CommStreamTest, DestructionRunsTheTasksStillQueued) {
  std::atomic<int> ran{0};
  std::promise<void> gate;
  std::shared_future<void> gate_open = gate.get_future().share();
  {
    CommStream stream(comm_);
    stream.submit([gate_open](const Communicator&) { gate_open.wait(); });
    for (int i = 0; i < 10; ++i) stream.submit([&ran](const Communicator&) { ++ran; });
    EXPECT_GE(stream.tasks_in_flight(), 10u);  // the worker is held by the gate
    gate.set_value();
  }
  EXPECT_EQ(ran.load(), 10);
}

TEST_F(CommStreamTest, CancelPendingDropsTasksNotStarted) {
  std::atomic<int> ran{0};
  std::promise<void> started;
  std::promise<void> gate;
  std::shared_future<void> gate_open = gate.get_future().share();
  CommStream stream(comm_);
  stream.submit([&started, gate_open](const Communicator&) {
    started.set_value();
    gate_open.wait();
  });
  std::vector<CommFuture> queued;
  for (int i = 0; i < 5; ++i) queued.push_back(stream.submit([&ran](const Communicator&) { ++ran; }));
  started.get_future().wait();  // the worker is inside the gate task; the 5 are queued
  EXPECT_EQ(stream.cancel_pending(), 5u);
  gate.set_value();
  stream.synchronize();  // cancelling is not a failure
  for (const CommFuture& f : queued) EXPECT_THROW(f.wait(), CommStreamError);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_FALSE(stream.failed());
  EXPECT_EQ(stream.tasks_finished(), 6u);
}

TEST_F(CommStreamTest, EmptyTaskAndEmptyFutureAreRejected) {
  CommStream stream(comm_);
  EXPECT_THROW(stream.submit(CommStream::Task{}), std::invalid_argument);
  EXPECT_THROW(CommFuture{}.wait(), CommStreamError);
  EXPECT_FALSE(CommFuture{}.valid());
}

TEST_F(CommStreamTest, IdleWorkerUsesNoCpu) {
  CommStream stream(comm_);
  clockid_t worker_clock{};
  stream.submit([&worker_clock](const Communicator&) {
    if (pthread_getcpuclockid(pthread_self(), &worker_clock) != 0) {
      throw std::runtime_error("pthread_getcpuclockid failed");
    }
  }).wait();
  auto cpu_ns = [&worker_clock] {
    timespec ts{};
    if (clock_gettime(worker_clock, &ts) != 0) throw std::runtime_error("clock_gettime failed");
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  };
  const long long before = cpu_ns();
  // Not synchronisation: this is the idle interval being measured.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const long long used = cpu_ns() - before;
  EXPECT_LT(used, 5'000'000LL) << "the idle worker used " << used << " ns of CPU in 200 ms";
}

}  // namespace
}  // namespace mpitrain
