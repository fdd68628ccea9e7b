// mpitrain's rows of the libtorch benchmark's TorchScript models (run_libtorch_bench.py
// --torchscript): a module saved by torch.jit.save (models/fashion_mnist_cnn.pt,
// models/fortunes_gpt.pt), loaded with torch::jit::load and trained through the Engine as the
// trainer's model.kind torchscript trains it (mpitrain::libtorch::TorchModel on the
// torch::jit::Module; torch's AdamW over its trained parameters, each tied tensor once,
// stepped by mpitrain's one-pass kernel; buffers broadcast before each forward as DDP does).
// Same batches, AdamW and timing as ddp_gloo.py --torchscript. The row is mpitrain (the
// Engine's defaults, as the trainer's) or mpitrain_overlap_off (--overlap off).
//
//   mpirun -np N libtorch_torchscript_bench --torchscript models/fortunes_gpt.pt
//       --task language_model [--block-size 128] [--batch 8] [--warmup 20] [--steps 200]
//       [--overlap on|off]
//
// classification: Fashion-MNIST, each image (1, 28, 28) pixel / 255, softmax cross-entropy.
// language_model: the fortunes corpus (/usr/share/games/fortunes, read as the trainer's
// data.kind text reads it) in windows of block_size + 1 bytes; the module maps (batch,
// block_size) int64 tokens to (batch, block_size, vocab) logits, cross-entropy over every
// position. Batches from the Engine's loader (seed 42), as ddp_gloo.py orders them.

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_timing.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/data/text_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"

namespace {

// Returns the benchmark's training set for `task`.
std::shared_ptr<const mpitrain::data::Dataset> training_set(const std::string& task, std::size_t block_size) {
  if (task == "classification") {
    return std::make_shared<mpitrain::data::IdxDataset>(mpitrain::data::fashion_mnist_train_paths());
  }
  mpitrain::data::TextCorpus corpus = mpitrain::data::read_text_files("/usr/share/games/fortunes");
  const std::size_t n = corpus.bytes.size();
  auto bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(corpus.bytes));
  return std::make_shared<mpitrain::data::TextDataset>(bytes, 0, n, block_size, "fortunes");
}

}  // namespace

int main(int argc, char** argv) try {
  mpitrain::MpiRuntime runtime(&argc, &argv);
  mpitrain::Communicator comm(runtime);
  bench::Options options;
  std::string path;
  std::string task = "classification";
  std::size_t block_size = 128;
  std::string overlap = "on";
  CLI::App app{"a TorchScript module through mpitrain's Engine"};
  bench::add_options(app, options);
  app.add_option("--torchscript", path, "the module's .pt file (torch.jit.save)")->required();
  app.add_option("--task", task, "classification | language_model")
      ->check(CLI::IsMember({"classification", "language_model"}));
  app.add_option("--block-size", block_size, "language_model: tokens per window");
  app.add_option("--overlap", overlap, "reduce buckets during backward")->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);  // one thread per rank: 2 ranks on 2 cores
  options.model = std::filesystem::path(path).stem().string();

  torch::manual_seed(0);
  torch::jit::Module module = torch::jit::load(path);
  module.train(true);
  torch::optim::AdamW optimizer(mpitrain::libtorch::unique_trained_parameters(module),
                                torch::optim::AdamWOptions(1e-3));
  mpitrain::EngineConfig config;
  config.blas_threads = 1;
  config.overlap = overlap == "on";
  mpitrain::Engine engine(config, comm);
  mpitrain::libtorch::TorchModel model(engine, module, optimizer);
  mpitrain::data::DataLoader loader =
      engine.make_loader(training_set(task, block_size), {.batch_size = options.batch, .seed = 42});
  const bool lm = task == "language_model";
  mpitrain::data::Batch batch;
  bench::run_timed(comm, overlap == "on" ? "mpitrain" : "mpitrain_overlap_off", options, [&](std::size_t) {
    loader.next(batch);
    const auto rows = static_cast<std::int64_t>(batch.labels.size());
    const torch::Tensor f = torch::from_blob(batch.features.data(),
                                             {rows, static_cast<std::int64_t>(batch.features.numel()) / rows});
    torch::Tensor x, y;
    if (lm) {
      const torch::Tensor tokens = f.to(torch::kLong);
      x = tokens.slice(1, 0, -1).contiguous();
      y = tokens.slice(1, 1).contiguous();
    } else {
      x = f.view({rows, 1, 28, 28});
      y = torch::from_blob(batch.labels.data(), {rows}, torch::kInt32).to(torch::kLong);
    }
    const torch::Tensor logits = model.forward(module, std::vector<torch::jit::IValue>{x}).toTensor();
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape(-1));
    model.backward(loss);
    engine.step();
    model.zero_grad();
    return loss.item<double>();
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "torchscript_bench: %s\n", e.what());
  return 1;
}
