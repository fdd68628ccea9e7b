// Gradient accumulation: 4 micro-batches of 16 examples per rank make one optimizer step of
// 4 x 16 x ranks examples (128 at 2 ranks), with one gradient synchronisation per step.
//
//   mpirun -np 2 ./gradient_accumulation [steps]      (default: 300 optimizer steps)
//
// The engine is configured with gradient_accumulation_steps = 4. It scales every loss
// gradient by 1 / (4 x ranks), so the synchronised gradient is the mean over ranks and
// micro-steps: the gradient of the mean loss of all 128 examples. Two ways to write a window:
//   - engine.accumulate() (Accelerate's accumulator.accumulate()): the engine decides which
//     micro-step synchronises, and sync_gradients() says whether this one did. The training
//     loop below uses it, and clips the gradient norm on each synchronising micro-step.
//   - engine.no_sync() (DDP's model.no_sync()): micro-steps started under the guard never
//     communicate, whatever the window, for code that decides the window itself. The first
//     window is written that way, and checked: its averaged gradients must equal the gradient
//     of one plain, undistributed pass over all 128 examples of all ranks (within float
//     rounding), and clip_grad_norm must return that gradient's norm.
// Needs Fashion-MNIST (Debian package dataset-fashion-mnist). Exit code 0 when those checks
// hold, every step took exactly 4 micro-steps, and the training loss fell.

#include <algorithm>
#include <cmath>
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

constexpr std::size_t kMicroBatch = 16;   // examples per rank and micro-step
constexpr std::size_t kAccumulation = 4;  // micro-steps per optimizer step
constexpr double kMaxNorm = 0.5;          // gradient clipping threshold (L2 norm)

// Returns `x` in scientific notation with 3 significant digits.
std::string sci(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", x);
  return text;
}

// Returns the L2 norm of all gradients together (what clip_grad_norm computes).
double gradient_norm(const std::vector<nn::Parameter*>& params) {
  double sum = 0.0;
  for (const nn::Parameter* p : params) {
    for (float g : p->grad.span()) sum += static_cast<double>(g) * g;
  }
  return std::sqrt(sum);
}

// Returns max |a - b| over all gradient values, divided by max |b|.
double relative_difference(const std::vector<nn::Parameter*>& a,
                           const std::vector<nn::Parameter*>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    for (std::size_t i = 0; i < b[k]->grad.numel(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a[k]->grad[i] - b[k]->grad[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(b[k]->grad[i])));
    }
  }
  return diff / scale;
}

}  // namespace

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  const std::uint64_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 300;
  const std::vector<std::size_t> hidden = {128};
  nn::Sequential model = nn::make_mlp(784, hidden, 10);
  nn::AdamW optimizer(model.parameters(), {.lr = 1e-3});
  EngineConfig config;
  config.gradient_accumulation_steps = kAccumulation;
  Engine engine(config, comm);  // after model and optimizer: they must outlive it

  auto train_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_train_paths());
  data::DataLoader train = engine.make_loader(train_set, {.batch_size = kMicroBatch, .seed = 42});
  engine.prepare(model, optimizer, train);  // broadcasts rank 0's weights to every rank

  // ---- the first window by hand, with no_sync(), checked against one pass over all examples
  // The reference model starts from the same weights (make_mlp with the same seed) and sees
  // every rank's micro-batches (engine.gather), in one batch of 4 x 16 x ranks rows.
  nn::Sequential reference = nn::make_mlp(784, hidden, 10);
  const std::size_t global_rows =
      kAccumulation * kMicroBatch * static_cast<std::size_t>(engine.world_size());
  Tensor all_features({global_rows, 784});
  std::vector<std::int32_t> all_labels;
  Tensor grad;
  data::Batch batch;
  bool ok = true;
  double window_loss = 0.0, window_norm = 0.0;  // sums over the current 50 steps
  for (std::size_t micro = 0; micro < kAccumulation; ++micro) {
    ok = engine.next_batch(batch) && ok;
    const Tensor features = engine.gather(batch.features);  // (16 x ranks, 784)
    std::copy_n(features.data(), features.numel(), all_features.data() + micro * features.numel());
    const std::vector<std::int32_t> labels = engine.gather<std::int32_t>(batch.labels);
    all_labels.insert(all_labels.end(), labels.begin(), labels.end());

    window_loss += nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
    if (micro + 1 < kAccumulation) {
      auto guard = engine.no_sync();
      engine.backward(grad);  // adds to this rank's gradients; no communication
      ok = !engine.sync_gradients() && ok;
    } else {
      engine.backward(grad);  // the 4th micro-step averages the gradients over ranks
      ok = engine.sync_gradients() && ok;
    }
  }
  reference.backward(nn::cross_entropy(reference.forward(all_features), all_labels).grad);
  const double difference = relative_difference(model.parameters(), reference.parameters());
  const double reference_norm = gradient_norm(reference.parameters());
  const double norm = engine.clip_grad_norm(kMaxNorm);  // the norm before clipping
  const double clipped_norm = gradient_norm(model.parameters());
  engine.print("first window: gradients vs one pass over " + std::to_string(global_rows) +
               " examples: max relative difference " + sci(difference) + "; norm " +
               sci(norm) + " (one pass: " + sci(reference_norm) + "), clipped to " +
               sci(clipped_norm));
  ok = ok && difference < 1e-5 && std::fabs(norm - reference_norm) <= 1e-5 * reference_norm &&
       std::fabs(clipped_norm - std::min(norm, kMaxNorm)) <= 1e-5 * kMaxNorm;
  window_norm += norm;
  engine.step();
  engine.zero_grad();

  // ---- the training loop, with accumulate() --------------------------------------------------
  double first_loss = 0.0, last_loss = 0.0;
  while (engine.step_count() < steps && engine.next_batch(batch)) {
    auto micro = engine.accumulate();  // this micro-step; decides sync_gradients()
    window_loss += nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
    engine.backward(grad);             // communicates on the 4th micro-step only
    if (!engine.sync_gradients()) continue;  // step() and zero_grad() would do nothing
    window_norm += engine.clip_grad_norm(kMaxNorm);
    engine.step();
    engine.zero_grad();
    if (engine.step_count() % 50 == 0) {  // means over the last 50 steps (200 micro-steps)
      last_loss = engine.reduce(window_loss / (50.0 * kAccumulation), ReduceOp::avg);
      if (first_loss == 0.0) first_loss = last_loss;
      engine.print("step " + std::to_string(engine.step_count()) + "  loss " +
                   std::to_string(last_loss) + "  grad norm " + std::to_string(window_norm / 50.0));
      window_loss = window_norm = 0.0;
    }
  }
  ok = ok && engine.micro_step() == kAccumulation * engine.step_count() && last_loss < first_loss;
  engine.print(ok ? "gradient_accumulation: OK" : "gradient_accumulation: FAILED");
  return comm.allreduce_value(ok ? 1 : 0, ReduceOp::min) == 1 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gradient_accumulation: %s\n", e.what());
  return 1;
}
