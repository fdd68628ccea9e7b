// Minimal data-parallel training: an MLP on Fashion-MNIST (Debian package
// dataset-fashion-mnist), each rank on its own shard, gradients averaged over ranks.
//
//   mpirun -np 2 ./minimal_ddp [max_steps]      (default: one epoch)
// Exit code 0 when the training loss fell and the test accuracy, over exactly the 10000
// test images, exceeds 70%.

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

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  const std::uint64_t max_steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;  // 0: all
  const std::vector<std::size_t> hidden = {256, 256};
  nn::Sequential model = nn::make_mlp(784, hidden, 10);  // 784-256-256-10, ReLU
  nn::AdamW optimizer(model.parameters(), {.lr = 1e-3});
  Engine engine(EngineConfig{}, comm);  // after model and optimizer: they must outlive it

  // Batches of 64 per rank. The test loader pads its last batches so that every rank has as
  // many; gather_for_metrics drops the padding again.
  auto train_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_train_paths());
  auto test_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_test_paths());
  data::DataLoader train = engine.make_loader(train_set, {.batch_size = 64, .seed = 42});
  data::DataLoader test = engine.make_loader(test_set, {.batch_size = 500, .shuffle = false});
  engine.prepare(model, optimizer, train);  // broadcasts rank 0's weights to every rank

  Tensor grad;
  double window = 0.0, first_loss = 0.0, last_loss = 0.0;
  for (data::Batch batch;
       (max_steps == 0 || engine.step_count() < max_steps) && engine.next_batch(batch);) {
    window += nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
    engine.backward(grad);  // averages the gradients over ranks
    engine.step();
    engine.zero_grad();
    if (engine.step_count() % 50 == 0) {  // mean loss of the last 50 steps over all ranks
      last_loss = engine.reduce(window / 50.0, ReduceOp::avg);
      if (first_loss == 0.0) first_loss = last_loss;
      engine.print("step " + std::to_string(engine.step_count()) + "  loss " +
                   std::to_string(last_loss));
      window = 0.0;
    }
  }

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
  const double accuracy = static_cast<double>(correct) / static_cast<double>(total);
  engine.print("test accuracy " + std::to_string(accuracy) + " on " + std::to_string(total));
  return last_loss < first_loss && total == test_set->size() && accuracy > 0.70 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "minimal_ddp: %s\n", e.what());
  return 1;
}
