// mpitrain's row of the libtorch benchmark: the CNN (cnn.hpp) trained through the Engine
// (mpitrain::libtorch::TorchModel: gradients as views of the engine's buckets, buckets
// reduced during backward from AccumulateGrad hooks; torch's AdamW stepped by mpitrain's
// one-pass kernel, TorchOptions::fused_adamw). Same batches, AdamW and timing as
// ddp_gloo.py and allreduce_after_backward.cpp. The row is named after the settings that
// differ from the defaults: mpitrain, mpitrain_overlap_off, mpitrain_torch_step.
//
//   mpirun -np 2 mpitrain_bench [--batch 64] [--warmup 20] [--steps 200] [--model cnn|wide]
//                               [--overlap on|off] [--fused-adamw on|off]

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "bench_timing.hpp"
#include "cnn.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"

int main(int argc, char** argv) try {
  mpitrain::MpiRuntime runtime(&argc, &argv);
  mpitrain::Communicator comm(runtime);
  bench::Options options;
  std::string overlap = "on";
  std::string fused = "on";
  CLI::App app{"libtorch CNN through mpitrain's Engine"};
  bench::add_options(app, options);
  app.add_option("--overlap", overlap, "reduce buckets during backward")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--fused-adamw", fused, "step torch's AdamW with mpitrain's one-pass kernel")
      ->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);  // one thread per rank: 2 ranks on 2 cores

  torch::manual_seed(0);
  bench::Cnn net(bench::cnn_shape(options.model));
  torch::optim::AdamW optimizer(net->parameters(), torch::optim::AdamWOptions(1e-3));
  mpitrain::EngineConfig config;
  config.blas_threads = 1;
  config.overlap = overlap == "on";
  mpitrain::Engine engine(config, comm);
  mpitrain::libtorch::TorchModel model(engine, *net, optimizer, {.fused_adamw = fused == "on"});
  auto train_set = std::make_shared<mpitrain::data::IdxDataset>(mpitrain::data::fashion_mnist_train_paths());
  mpitrain::data::DataLoader loader = engine.make_loader(train_set, {.batch_size = options.batch, .seed = 42});
  mpitrain::data::Batch batch;
  const std::string impl = std::string("mpitrain") + (overlap == "off" ? "_overlap_off" : "") +
                           (fused == "off" ? "_torch_step" : "");
  bench::run_timed(comm, impl, options, [&](std::size_t) {
    loader.next(batch);
    auto [x, y] = bench::to_torch(batch);
    torch::Tensor loss = torch::nn::functional::cross_entropy(model.forward(*net, x), y);
    model.backward(loss);
    engine.step();
    model.zero_grad();
    return loss.item<double>();
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mpitrain_bench: %s\n", e.what());
  return 1;
}
