// CTest torch.precision_accuracy (issue 19): the Fashion-MNIST CNN of torch_models.hpp
// trained through mpitrain::libtorch::TorchModel at 2 ranks in fp32, in bf16 (libtorch's CPU
// autocast: convolutions and linear layers run real bf16 kernels; mixed_precision bf16) and
// in fp16 with dynamic loss scaling (mixed_precision fp16: the loss scaler and its skipped
// steps, gradients sent as fp16 on the wire; libtorch 1.13's CPU autocast supports bf16 only,
// "CPU Autocast only supports dtype of torch.bfloat16 currently", so the fp16 run computes
// in fp32). Same initial weights and batches for the three; each must reach within 1 point
// of fp32's test accuracy (over the 10000 test images). Prints a table.
//
//   mpiexec -n 2 torch_precision_accuracy [steps]      (default 300 optimizer steps)

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"
#include "torch_models.hpp"

using namespace mpitrain;

namespace {

struct Result {
  double accuracy = 0.0;
  double last_loss = 0.0;
  std::uint64_t skipped = 0;
};

std::pair<torch::Tensor, torch::Tensor> to_torch(data::Batch& batch) {
  const auto rows = static_cast<std::int64_t>(batch.labels.size());
  return {torch::from_blob(batch.features.data(), {rows, 784}, torch::kFloat32),
          torch::from_blob(batch.labels.data(), {rows}, torch::kInt32).to(torch::kLong)};
}

// Returns the test accuracy (and the last loss, averaged over ranks) after `steps` steps of
// the CNN from seed 0's initial weights, under `config`.
Result train(const Communicator& comm, EngineConfig config, std::size_t steps,
             const std::shared_ptr<data::IdxDataset>& train_set,
             const std::shared_ptr<data::IdxDataset>& test_set) {
  torch::manual_seed(0);
  torch_test::Cnn net(false);
  torch::optim::AdamW optimizer(net->parameters(), torch::optim::AdamWOptions(1e-3));
  config.blas_threads = 1;
  Engine engine(config, comm);
  libtorch::TorchModel model(engine, *net, optimizer);
  data::DataLoader train = engine.make_loader(train_set, {.batch_size = 64, .seed = 42});
  data::DataLoader test = engine.make_loader(test_set, {.batch_size = 500, .shuffle = false});
  Result result;
  net->train();
  for (data::Batch batch; engine.step_count() < steps && train.next(batch);) {
    auto [x, y] = to_torch(batch);
    torch::Tensor loss;
    {
      auto autocast = model.autocast();  // bf16 kernels when mixed_precision is bf16
      loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    }
    model.backward(loss);
    engine.step();
    model.zero_grad();
    result.last_loss = loss.item<double>();
  }
  result.last_loss = engine.reduce(result.last_loss, ReduceOp::avg);
  result.skipped = engine.state().skipped_steps;
  net->eval();
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0, total = 0;
  for (data::Batch batch; test.next(batch);) {
    auto [x, y] = to_torch(batch);
    torch::Tensor logits;
    {
      auto autocast = model.autocast();
      logits = net->forward(x);
    }
    torch::Tensor all = model.gather_for_metrics(logits.argmax(1).eq(y).to(torch::kInt32), batch.real_count);
    correct += all.sum().item<std::int64_t>();
    total += all.size(0);
  }
  if (total != static_cast<std::int64_t>(test_set->size())) {
    throw std::runtime_error("evaluated " + std::to_string(total) + " test images, expected " +
                             std::to_string(test_set->size()));
  }
  result.accuracy = static_cast<double>(correct) / static_cast<double>(total);
  return result;
}

}  // namespace

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  const std::size_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 300;
  torch::set_num_threads(1);
  auto train_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_train_paths());
  auto test_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_test_paths());

  EngineConfig fp32, bf16, fp16;
  bf16.mixed_precision = Precision::bf16;
  fp16.mixed_precision = Precision::fp16;
  fp16.grad_comm_dtype = DType::f16;
  const Result base = train(comm, fp32, steps, train_set, test_set);
  const Result with_bf16 = train(comm, bf16, steps, train_set, test_set);
  const Result with_fp16 = train(comm, fp16, steps, train_set, test_set);

  bool ok = true;
  auto row = [&](const char* name, const Result& r) {
    const double points = 100.0 * (r.accuracy - base.accuracy);
    const bool within = std::abs(points) <= 1.0;
    ok = ok && within;
    if (comm.rank() == 0) {
      std::printf("%-34s accuracy %.4f  (%+.2f points vs fp32)  last loss %.4f  skipped steps %llu  %s\n",
                  name, r.accuracy, points, r.last_loss, static_cast<unsigned long long>(r.skipped),
                  within ? "ok" : "FAIL (more than 1 point)");
    }
  };
  if (comm.rank() == 0) std::printf("CNN, 2 ranks x 64, %zu AdamW steps, test accuracy on 10000 images\n", steps);
  row("fp32", base);
  row("bf16 (CPU autocast)", with_bf16);
  row("fp16 (loss scaling, fp16 wire)", with_fp16);
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "torch_precision_accuracy: %s\n", e.what());
  return 1;
}
