// The mpitrain side of the reference test (reference_test.py): trains one of the models of
// torch_models.hpp through the Engine (mpitrain::libtorch::TorchModel) from the initial
// weights reference_training.py wrote, on the Fashion-MNIST batches of mpitrain's loader
// (seed 42, `batch` per rank), for `steps` AdamW steps, and has rank 0 write the final
// floating state (parameters and float buffers, torch names) to a safetensors file.
//
//   mpiexec -n R torch_reference_train MODEL INIT.safetensors OUT.safetensors STEPS BATCH
// MODEL: cnn, cnn_bn or tied. One torch thread per rank.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"
#include "torch_models.hpp"

using namespace mpitrain;

int main(int argc, char** argv) try {
  MpiRuntime runtime(&argc, &argv);
  Communicator comm(runtime);
  if (argc != 6) {
    std::fprintf(stderr, "usage: torch_reference_train MODEL INIT OUT STEPS BATCH\n");
    return 2;
  }
  const std::string kind = argv[1];
  const std::filesystem::path init = argv[2], out = argv[3];
  const std::size_t steps = std::strtoull(argv[4], nullptr, 10);
  const std::size_t batch_size = std::strtoull(argv[5], nullptr, 10);
  torch::set_num_threads(1);

  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  if (kind == "tied") {
    torch_test::Tied tied;
    module = tied.ptr();
    forward = [tied](const torch::Tensor& x) mutable { return tied->forward(x); };
  } else if (kind == "cnn" || kind == "cnn_bn") {
    torch_test::Cnn cnn(kind == "cnn_bn");
    module = cnn.ptr();
    forward = [cnn](const torch::Tensor& x) mutable { return cnn->forward(x); };
  } else {
    throw std::invalid_argument("unknown model '" + kind + "' (cnn, cnn_bn, tied)");
  }
  torch_test::load_floating_state(*module, init);
  // unique_parameters: the tied weight once (module->parameters() lists it under both names).
  torch::optim::AdamW optimizer(libtorch::unique_parameters(*module),
                                torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  EngineConfig config;
  config.blas_threads = 1;
  Engine engine(config, comm);
  libtorch::TorchModel model(engine, *module, optimizer);

  auto train_set = std::make_shared<data::IdxDataset>(data::fashion_mnist_train_paths());
  data::DataLoader loader = engine.make_loader(train_set, {.batch_size = batch_size, .seed = 42});
  module->train();
  data::Batch batch;
  while (engine.step_count() < steps && loader.next(batch)) {
    const auto rows = static_cast<std::int64_t>(batch.labels.size());
    const torch::Tensor x = torch::from_blob(batch.features.data(), {rows, 784}, torch::kFloat32);
    const torch::Tensor y = torch::from_blob(batch.labels.data(), {rows}, torch::kInt32).to(torch::kLong);
    model.before_forward();
    model.backward(torch::nn::functional::cross_entropy(forward(x), y));
    engine.step();
    model.zero_grad();
  }
  if (engine.rank() == 0) torch_test::save_floating_state(*module, out);
  engine.print("trained " + kind + " for " + std::to_string(engine.step_count()) + " steps on " +
               std::to_string(engine.world_size()) + " rank(s) x " + std::to_string(batch_size));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "torch_reference_train: %s\n", e.what());
  return 1;
}
