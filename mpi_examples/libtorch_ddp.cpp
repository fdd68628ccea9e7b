// Data-parallel training of a libtorch model: a CNN on Fashion-MNIST (Debian package
// dataset-fashion-mnist), each rank on its own shard, gradients averaged over ranks by
// mpitrain's Engine (buckets reduced during backward, .grad tensors are views of them).
// Needs the libtorch component (mpitrain::torch; Debian's libtorch-dev).
//
//   mpirun -np 2 ./libtorch_ddp [max_steps]      (default: one epoch)
// Exit code 0 when the test accuracy, over exactly the 10000 test images, exceeds 80%.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"

using namespace mpitrain;

struct NetImpl : torch::nn::Module {  // (batch, 784) pixels -> (batch, 10) logits
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 8, 3).padding(1)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(8, 16, 3).padding(1)};
  torch::nn::Linear fc1{16 * 7 * 7, 64}, fc2{64, 10};
  NetImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x.view({-1, 1, 28, 28}))), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
};
TORCH_MODULE(Net);

// Returns the batch as torch tensors: features (batch, 784) viewing its storage, labels int64.
std::pair<torch::Tensor, torch::Tensor> to_torch(data::Batch& batch) {
  const auto rows = static_cast<std::int64_t>(batch.labels.size());
  return {torch::from_blob(batch.features.data(), {rows, 784}, torch::kFloat32),
          torch::from_blob(batch.labels.data(), {rows}, torch::kInt32).to(torch::kLong)};
}

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  const std::uint64_t max_steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;  // 0: all
  torch::set_num_threads(1);  // one thread per rank (here 2 ranks share 2 cores)

  Net net;
  // unique_parameters: each tensor once, also when weights are tied (parameters() would
  // list a tied tensor under each of its names, and the optimizer would step it twice).
  torch::optim::AdamW optimizer(libtorch::unique_parameters(*net), torch::optim::AdamWOptions(1e-3));
  Engine engine(EngineConfig{}, comm);
  libtorch::TorchModel model(engine, *net, optimizer);  // rank 0's weights on every rank

  auto train_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_train_paths());
  auto test_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_test_paths());
  data::DataLoader train = engine.make_loader(train_set, {.batch_size = 64, .seed = 42});
  data::DataLoader test = engine.make_loader(test_set, {.batch_size = 500, .shuffle = false});

  net->train();
  for (data::Batch batch; (max_steps == 0 || engine.step_count() < max_steps) && train.next(batch);) {
    auto [x, y] = to_torch(batch);
    // model.forward broadcasts rank 0's buffers (none in this net) before net->forward(x).
    torch::Tensor loss = torch::nn::functional::cross_entropy(model.forward(*net, x), y);
    model.backward(loss);    // gradients averaged over ranks
    engine.step();           // optimizer.step()
    model.zero_grad();       // in place: .grad stays a view of the buckets
    if (engine.step_count() % 50 == 0) {
      engine.print("step " + std::to_string(engine.step_count()) + "  loss " +
                   std::to_string(engine.reduce(loss.item<double>(), ReduceOp::avg)));
    }
  }

  net->eval();
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0, total = 0;
  for (data::Batch batch; test.next(batch);) {
    auto [x, y] = to_torch(batch);
    torch::Tensor hits = net->forward(x).argmax(1).eq(y).to(torch::kInt32);
    torch::Tensor all = model.gather_for_metrics(hits, batch.real_count);  // padding dropped
    correct += all.sum().item<std::int64_t>();
    total += all.size(0);
  }
  const double accuracy = static_cast<double>(correct) / static_cast<double>(total);
  engine.print("test accuracy " + std::to_string(accuracy) + " on " + std::to_string(total));
  return total == static_cast<std::int64_t>(test_set->size()) && accuracy > 0.80 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "libtorch_ddp: %s\n", e.what());
  return 1;
}
