#include "memory_budget.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace mpitrain::app {
namespace {

TrainConfig config_of(std::vector<std::int64_t> hidden, std::int64_t batch) {
  TrainConfig c = load_config("", {});
  c.model.mlp.hidden = std::move(hidden);
  c.data.batch_size = batch;
  return c;
}

TEST(MemoryBudget, CountsParametersCopiesAndBatchBytes) {
  // 784 -> 256 -> 256 -> 10: 269322 parameters (README's figure), adamw: 5 copies.
  const MemoryNeed need = memory_need(config_of({256, 256}, 64), 784, 10, 2);
  EXPECT_EQ(need.parameters, 269322u);
  EXPECT_EQ(need.model_bytes, 269322u * 4 * 5);
  EXPECT_EQ(need.batch_bytes, 64u * (784 + 1 + 3 * (512 + 10)) * 4);
  TrainConfig sgd = config_of({256, 256}, 64);
  sgd.optimizer.kind = "sgd";
  EXPECT_EQ(memory_need(sgd, 784, 10, 2).model_bytes, 269322u * 4 * 3);
  sgd.data.split_batches = true;
  EXPECT_EQ(memory_need(sgd, 784, 10, 2).batch_bytes, 32u * (784 + 1 + 3 * (512 + 10)) * 4);
}

TEST(MemoryBudget, SaturatesInsteadOfOverflowing) {
  const MemoryNeed need = memory_need(config_of({std::numeric_limits<std::int64_t>::max()}, 1), 784, 10, 1);
  EXPECT_EQ(need.model_bytes, std::numeric_limits<std::uint64_t>::max());
}

TEST(MemoryBudget, RefusesNamingTheLargerPartAndTheBytes) {
  const TrainConfig c = config_of({256, 256}, 64);
  const MemoryNeed need = memory_need(c, 784, 10, 2);
  const std::uint64_t per_rank = need.model_bytes + need.batch_bytes;
  EXPECT_NO_THROW(check_memory(c, need, 2, 2 * per_rank));
  try {
    check_memory(c, need, 2, 2 * per_rank - 1);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config: model.hidden: the model's 269322 parameters need 5386440 bytes (0.0 GiB) for weights, "
              "gradients, buckets and optimizer state per rank; 2 ranks on this node need 11976592 bytes (0.0 GiB), "
              "more than the 11976591 bytes (0.0 GiB) available");
  }
  const TrainConfig big = config_of({8}, 1000000);
  try {
    check_memory(big, memory_need(big, 784, 10, 1), 1, 1000);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("config: data.batch_size: a batch of 1000000 needs")) << e.what();
  }
}

TEST(MemoryBudget, AvailableMemoryIsKnownOnLinux) {
  const std::uint64_t bytes = available_memory_bytes();
  EXPECT_GT(bytes, 0u);
  EXPECT_LT(bytes, std::numeric_limits<std::uint64_t>::max());
}

}  // namespace
}  // namespace mpitrain::app
