// Mixed precision on real data: the Fashion-MNIST MLP (784-256-256-10, ReLU, AdamW lr 1e-3,
// batch 64 per rank, 2 epochs, the trainer's defaults) trained by the Engine in bf16 and in
// fp16 (dynamic loss scaling) ends within 1 percentage point of the same run in fp32.
//
// This is the full run, on all 60,000 training and 10,000 test examples: three runs of 938
// steps take about 8 s at 2 ranks (Release, 2-core VM), so CI needs no subset. Rank 0 prints
// the accuracies, training times, skipped steps and final loss scales.
//
// The runs are deterministic (fixed seeds, one BLAS thread per rank), so the test passes or
// fails the same way every time on a given machine. For scale: torch 1.13 trains the same
// model the same way (fp32) to 84.5-85.2% over seeds 0-2, a spread of 0.7 points from the
// initialisation alone; the 1-point margin is a real constraint, not a formality.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"

namespace mpitrain {
namespace {

constexpr std::size_t kEpochs = 2;
constexpr std::size_t kBatchPerRank = 64;
constexpr std::size_t kClasses = 10;
const std::vector<std::size_t> kHidden = {256, 256};

struct RunResult {
  double accuracy = 0.0;  // fraction of the test set
  double seconds = 0.0;   // training only, the slowest rank
  std::uint64_t steps = 0;
  std::uint64_t skipped_steps = 0;
  float final_loss_scale = 1.0f;
};

// Returns the fraction of `test` that `model` classifies correctly; each rank evaluates a
// contiguous share and the counts are summed.
double accuracy(Engine& engine, nn::Sequential& model, const data::Dataset& test) {
  const std::size_t n = static_cast<std::size_t>(engine.world_size());
  const std::size_t r = static_cast<std::size_t>(engine.rank());
  const std::size_t begin = test.size() * r / n;
  const std::size_t end = test.size() * (r + 1) / n;
  double correct = 0.0;
  constexpr std::size_t kEvalBatch = 500;
  for (std::size_t at = begin; at < end; at += kEvalBatch) {
    const std::size_t rows = std::min(kEvalBatch, end - at);
    std::vector<std::size_t> idx(rows);
    for (std::size_t i = 0; i < rows; ++i) idx[i] = at + i;
    Tensor x({rows, test.feature_size()});
    std::vector<std::int32_t> y(rows);
    test.get_batch(idx, x.span(), y);
    const Tensor logits = model.forward(x);
    for (std::size_t i = 0; i < rows; ++i) {
      std::size_t best = 0;
      for (std::size_t c = 1; c < kClasses; ++c) {
        if (logits.data()[i * kClasses + c] > logits.data()[i * kClasses + best]) best = c;
      }
      correct += best == static_cast<std::size_t>(y[i]) ? 1.0 : 0.0;
    }
  }
  return engine.reduce(correct) / static_cast<double>(test.size());
}

RunResult train(const Communicator& comm, Precision precision,
                std::shared_ptr<const data::Dataset> train_set, const data::Dataset& test_set) {
  EngineConfig config;
  config.mixed_precision = precision;
  nn::Sequential model = nn::make_mlp(784, kHidden, kClasses, nn::Activation::relu, 0.0f, 1);
  nn::AdamW optimizer(model.parameters(), nn::AdamWOptions{});
  data::DataLoaderOptions lo;
  lo.batch_size = kBatchPerRank;
  lo.shuffle = true;
  lo.seed = 2;
  data::DataLoader loader(std::move(train_set), lo);
  Engine engine(config, comm);
  nn::set_blas_threads(1);  // after the Engine, whatever it chose: deterministic GEMMs
  engine.prepare(model, optimizer, loader);

  engine.wait_for_everyone();
  const auto t0 = std::chrono::steady_clock::now();
  Tensor grad;
  data::Batch batch;
  for (std::size_t epoch = 0; epoch < kEpochs; ++epoch) {
    while (engine.next_batch(batch)) {
      const Tensor logits = model.forward(batch.features);
      nn::cross_entropy(logits, batch.labels, grad);
      engine.backward(grad);
      engine.step();
      engine.zero_grad();
    }
  }
  const double local_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RunResult result;
  result.seconds = engine.reduce(local_s, ReduceOp::max);
  result.accuracy = accuracy(engine, model, test_set);
  result.steps = engine.step_count();
  result.skipped_steps = engine.state().skipped_steps;
  result.final_loss_scale = engine.loss_scale();
  return result;
}

TEST(MixedPrecisionAccuracy, Bf16AndFp16EndWithinOnePointOfFp32OnFashionMnist) {
  MpiRuntime runtime;
  Communicator comm(runtime);
  auto train_set = std::make_shared<const data::IdxDataset>(data::fashion_mnist_train_paths());
  const data::IdxDataset test(data::fashion_mnist_test_paths());
  ASSERT_EQ(train_set->size(), 60000u);
  ASSERT_EQ(test.size(), 10000u);

  const RunResult fp32 = train(comm, Precision::fp32, train_set, test);
  const RunResult bf16 = train(comm, Precision::bf16, train_set, test);
  const RunResult fp16 = train(comm, Precision::fp16, train_set, test);
  if (comm.rank() == 0) {
    std::printf("# Fashion-MNIST MLP 784-256-256-10, AdamW lr 1e-3, batch %zu x %d ranks, %zu "
                "epochs on %zu training examples, %zu test examples\n",
                kBatchPerRank, comm.size(), kEpochs, train_set->size(), test.size());
    std::printf("%-6s %9s %9s %7s %8s %11s\n", "prec", "accuracy", "train_s", "steps", "skipped",
                "loss_scale");
    for (const auto& [name, r] : {std::pair<const char*, const RunResult&>{"fp32", fp32},
                                  {"bf16", bf16}, {"fp16", fp16}}) {
      std::printf("%-6s %8.2f%% %9.2f %7llu %8llu %11g\n", name, 100.0 * r.accuracy, r.seconds,
                  static_cast<unsigned long long>(r.steps),
                  static_cast<unsigned long long>(r.skipped_steps),
                  static_cast<double>(r.final_loss_scale));
    }
    std::fflush(stdout);
  }
  // Learning happened at all (10 classes: chance is 10%).
  EXPECT_GT(fp32.accuracy, 0.80);
  EXPECT_LE(std::fabs(bf16.accuracy - fp32.accuracy), 0.01);
  EXPECT_LE(std::fabs(fp16.accuracy - fp32.accuracy), 0.01);
  EXPECT_EQ(fp32.skipped_steps, 0u);
  EXPECT_EQ(bf16.skipped_steps, 0u);
  // fp16 at scale 2^16 (torch's initial scale): this model's scaled gradients stay below
  // fp16's 65504 (measured: no step skipped), and 938 steps are fewer than the growth
  // interval of 2000, so the scale never moves. A handful of skips would still be normal.
  EXPECT_LT(fp16.skipped_steps, 20u);
  EXPECT_EQ(fp16.steps, fp32.steps);
}

}  // namespace
}  // namespace mpitrain
