// Mixed precision, emulated on CPU: the same MLP trained on Fashion-MNIST three times, with
// EngineConfig::mixed_precision fp32 ("no"), bf16 and fp16, from the same initial weights
// over the same batches, then compared.
//
//   mpirun -np 2 ./mixed_precision [steps]      (default: 400 optimizer steps per run)
//
// What the engine does (DESIGN.md section 3): the weights used in forward, the activations
// and all gradients are rounded to the 16-bit format as a GPU would store them, products
// accumulate in fp32, and the master weights and AdamW state stay fp32.
//   - bf16 keeps fp32's exponent range: no loss scaling; an inf/NaN gradient follows
//     nan_policy (error by default).
//   - fp16 has 5 exponent bits: small gradients flush to zero and values from 65520 up
//     overflow to inf. The engine multiplies the loss gradient by a dynamic loss scale
//     (torch's GradScaler semantics), removes it before the optimizer step, and skips a step
//     whose gradients hold inf/NaN (it still counts as a step) while halving the scale; after
//     growth_interval clean steps in a row it doubles the scale. Here the scale starts at
//     2^24 instead of torch's 2^16, with growth_interval 100 instead of 2000, so that a short
//     run shows both: the first steps overflow until the scale has come down to what the
//     gradients allow, and later the scale probes upwards again.
// Needs Fashion-MNIST (Debian package dataset-fashion-mnist). Exit code 0 when every run's
// loss fell, bf16 and fp16 reach a test accuracy within 2 points of fp32, fp16 skipped some
// steps, and every change of its loss scale was the one GradScaler makes.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"

using namespace mpitrain;

namespace {

constexpr double kInitScale = 16777216.0;      // 2^24
constexpr std::int64_t kGrowthInterval = 100;  // clean steps before the scale doubles

struct RunResult {
  double first_loss = 0.0;  // mean training loss of the first 50 steps, all ranks
  double last_loss = 0.0;   // of the last 50 steps
  double accuracy = 0.0;    // on the whole test set
  std::uint64_t steps = 0;
  std::uint64_t skipped_steps = 0;
  float loss_scale = 1.0f;  // after the last step
  bool scale_as_expected = true;  // every change of the loss scale was GradScaler's
};

// Returns the results of training a 784-256-256-10 MLP for `steps` optimizer steps in
// precision `precision`, then evaluating it on `test_set`.
RunResult train(const Communicator& comm, Precision precision, std::uint64_t steps,
                const std::shared_ptr<data::IdxDataset>& train_set,
                const std::shared_ptr<data::IdxDataset>& test_set) {
  const std::vector<std::size_t> hidden = {256, 256};
  nn::Sequential model = nn::make_mlp(784, hidden, 10);  // the same weights in every run
  nn::AdamW optimizer(model.parameters(), {.lr = 1e-3});
  EngineConfig config;
  config.mixed_precision = precision;
  config.loss_scaler.init_scale = kInitScale;  // used by fp16 only
  config.loss_scaler.growth_interval = kGrowthInterval;
  Engine engine(config, comm);  // after model and optimizer: they must outlive it
  data::DataLoader train = engine.make_loader(train_set, {.batch_size = 64, .seed = 42});
  data::DataLoader test = engine.make_loader(test_set, {.batch_size = 500, .shuffle = false});
  engine.prepare(model, optimizer, train);  // also model.set_precision(precision)

  RunResult result;
  Tensor grad;
  double window = 0.0;
  std::int64_t clean_steps = 0;  // steps since the scale last changed or overflowed
  const std::string name(to_string(precision));
  for (data::Batch batch; engine.step_count() < steps && engine.next_batch(batch);) {
    window += nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
    const float scale = engine.loss_scale();  // what this backward multiplies the loss by
    engine.backward(grad);
    const bool updated = engine.step();
    engine.zero_grad();
    // What GradScaler does: halve and skip on overflow, double after kGrowthInterval clean
    // steps, otherwise keep. Without fp16 the scale is 1 and nothing is skipped.
    const float next = engine.loss_scale();
    const std::string at = name + " step " + std::to_string(engine.step_count());
    if (!updated) {
      engine.print("  " + at + " skipped: inf/NaN gradients at loss scale " +
                   std::to_string(static_cast<long long>(scale)) + ", next scale " +
                   std::to_string(static_cast<long long>(next)));
      result.scale_as_expected = result.scale_as_expected && next == scale / 2.0f;
      clean_steps = 0;
    } else if (precision == Precision::fp16 && ++clean_steps == kGrowthInterval) {
      engine.print("  " + at + ": " + std::to_string(kGrowthInterval) +
                   " clean steps, the loss scale grows to " +
                   std::to_string(static_cast<long long>(next)));
      result.scale_as_expected = result.scale_as_expected && next == scale * 2.0f;
      clean_steps = 0;
    } else {
      result.scale_as_expected = result.scale_as_expected && next == scale;
    }
    if (engine.step_count() % 50 == 0) {
      result.last_loss = engine.reduce(window / 50.0, ReduceOp::avg);
      if (result.first_loss == 0.0) result.first_loss = result.last_loss;
      window = 0.0;
    }
  }
  result.steps = engine.step_count();
  result.skipped_steps = engine.state().skipped_steps;
  result.loss_scale = engine.loss_scale();

  model.train(false);
  std::size_t correct = 0, total = 0;
  for (data::Batch batch; test.next(batch);) {
    const Tensor logits = model.forward(batch.features);  // (batch, 10)
    std::vector<std::int32_t> hit(batch.labels.size());
    for (std::size_t i = 0; i < hit.size(); ++i) {
      const float* row = logits.data() + 10 * i;
      hit[i] = std::max_element(row, row + 10) - row == batch.labels[i];
    }
    const auto all = engine.gather_for_metrics<std::int32_t>(hit, batch.real_count);
    total += all.size();
    correct += static_cast<std::size_t>(std::count(all.begin(), all.end(), 1));
  }
  result.accuracy = static_cast<double>(correct) / static_cast<double>(total);
  return result;
}

}  // namespace

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  const std::uint64_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 400;
  auto train_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_train_paths());
  auto test_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_test_paths());

  const Precision precisions[] = {Precision::fp32, Precision::bf16, Precision::fp16};
  std::vector<RunResult> results;
  for (Precision p : precisions) results.push_back(train(comm, p, steps, train_set, test_set));

  bool ok = true;
  if (comm.rank() == 0) {
    std::printf("%-10s %8s %10s %10s %9s %8s %11s\n", "precision", "steps", "first loss",
                "last loss", "accuracy", "skipped", "loss scale");
  }
  for (std::size_t k = 0; k < results.size(); ++k) {
    const RunResult& r = results[k];
    if (comm.rank() == 0) {
      std::printf("%-10s %8llu %10.4f %10.4f %8.2f%% %8llu %11g\n",
                  std::string(to_string(precisions[k])).c_str(),
                  static_cast<unsigned long long>(r.steps), r.first_loss, r.last_loss,
                  100.0 * r.accuracy, static_cast<unsigned long long>(r.skipped_steps),
                  static_cast<double>(r.loss_scale));
    }
    ok = ok && r.last_loss < r.first_loss && r.steps == steps && r.scale_as_expected &&
         r.accuracy > results[0].accuracy - 0.02;
  }
  const RunResult& fp16 = results[2];
  ok = ok && fp16.skipped_steps > 0 && results[0].skipped_steps == 0 &&
       results[1].skipped_steps == 0 && results[0].loss_scale == 1.0f &&
       results[1].loss_scale == 1.0f;
  if (comm.rank() == 0) std::printf("mixed_precision: %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mixed_precision: %s\n", e.what());
  return 1;
}
