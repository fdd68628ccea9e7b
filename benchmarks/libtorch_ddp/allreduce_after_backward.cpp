// Baseline (b) of the libtorch benchmark: the gradient averaging of the official libtorch
// example (pytorch/examples cpp/distributed/dist-mnist.cpp), written out: after backward,
// one blocking MPI_Allreduce(SUM) per parameter gradient, in parameter order, then a division
// by the world size; no buckets, no overlap with backward. The allreduce here is mpitrain's
// Communicator::allreduce with the algorithm "mpi", which is that MPI_Allreduce call (only
// collectives/ may call MPI). Same CNN (cnn.hpp), batches, AdamW and timing as the others.
//
//   mpirun -np 2 allreduce_after_backward [--batch 64] [--warmup 20] [--steps 200] [--model cnn|wide]

#include <cstdio>
#include <exception>
#include <memory>
#include <span>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "bench_timing.hpp"
#include "cnn.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"

int main(int argc, char** argv) try {
  mpitrain::MpiRuntime runtime(&argc, &argv);
  mpitrain::Communicator comm(runtime);
  bench::Options options;
  CLI::App app{"libtorch CNN, hand-written allreduce after backward"};
  bench::add_options(app, options);
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);  // one thread per rank: 2 ranks on 2 cores

  torch::manual_seed(0);  // the same initial weights on every rank, as dist-mnist.cpp
  bench::Cnn model(bench::cnn_shape(options.model));
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  auto train_set = std::make_shared<mpitrain::data::IdxDataset>(mpitrain::data::fashion_mnist_train_paths());
  mpitrain::data::DataLoader loader(train_set, {.batch_size = options.batch, .seed = 42,
                                                .world_size = static_cast<std::size_t>(comm.size()),
                                                .rank = static_cast<std::size_t>(comm.rank())});
  mpitrain::data::Batch batch;
  bench::run_timed(comm, "cpp_allreduce_after_backward", options, [&](std::size_t) {
    loader.next(batch);
    auto [x, y] = bench::to_torch(batch);
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    for (const torch::Tensor& p : model->parameters()) {  // dist-mnist.cpp's loop
      torch::Tensor grad = p.grad();
      comm.allreduce(std::span<float>(grad.data_ptr<float>(), static_cast<std::size_t>(grad.numel())),
                     mpitrain::ReduceOp::sum, "mpi");
      grad.div_(comm.size());
    }
    optimizer.step();
    return loss.item<double>();
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "allreduce_after_backward: %s\n", e.what());
  return 1;
}
