// train_bench: data-parallel training throughput of the Engine at the launched world size.
//
//   mpirun -np N train_bench [--steps N] [--warmup N] [--repeats R] [--model small|large|all]
//                            [--overlap on|off|both] [--optimizer adamw|sgd]
//                            [--bucket-cap-mb MB] [--first-bucket-mb MB] [--blas-threads T]
//                            [--grad-comm-dtype f32|bf16|f16] [--algo default|mpi|ring]
//                            [--json FILE]
//
// Models: MLP 784-256-256-10 at batch 64 per rank ("small") and 784-1024-1024-10 at batch 128
// per rank ("large"), ReLU, cross-entropy, AdamW (the trainer's defaults), on synthetic
// batches generated before timing (so the data pipeline is not measured). BLAS threads per
// rank = hardware threads of the node / ranks on the node (--blas-threads overrides).
// Buckets: the engine's defaults (25 MiB, first 1 MiB) unless given.
//
// A step is forward + loss + engine.backward + engine.step + engine.zero_grad. Columns:
//   step_ms       median step time (the slowest rank's median)
//   samples/s     world_size * batch / step_ms
//   compute_ms    median time of the same step without the engine (model.backward,
//                 optimizer.step, zero_grad), run by every rank at the same time, in blocks
//                 interleaved with the engines' blocks (bare, overlap on, overlap off, bare,
//                 ...), so that all columns see the same machine load
//   exposed_ms    median time backward waited for the gradient reductions after the model's
//                 backward returned ("exposed comm")
//   overhead_ms   step_ms - compute_ms - exposed_ms: everything else the engine costs (hooks,
//                 launching buckets, the inf/NaN pass, a communication thread competing with
//                 compute for the cores); overhead% = overhead_ms / step_ms
// Medians are robust on a shared machine; each rank's median is taken over its own steps,
// then the maximum over ranks is reported.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace {

using namespace mpitrain;
using Clock = std::chrono::steady_clock;

struct Model {
  std::string name;
  std::vector<std::size_t> hidden;
  std::size_t batch;
};

constexpr std::size_t kInputs = 784;
constexpr std::size_t kClasses = 10;
constexpr std::size_t kBatches = 4;  // distinct batches cycled through

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

struct Batches {
  std::vector<nn::Tensor> features;               // (batch, 784)
  std::vector<std::vector<std::int32_t>> labels;  // (batch)
};

// Returns kBatches batches of this rank's own synthetic examples.
Batches make_batches(std::size_t batch, int rank) {
  data::SyntheticOptions o;
  o.size = kBatches * batch * 64;
  o.feature_dim = kInputs;
  o.num_classes = kClasses;
  o.seed = 42;
  const data::SyntheticDataset ds(o);
  Batches b;
  for (std::size_t k = 0; k < kBatches; ++k) {
    std::vector<std::size_t> idx(batch);
    for (std::size_t i = 0; i < batch; ++i) {
      idx[i] = ((static_cast<std::size_t>(rank) * kBatches + k) * batch + i) % o.size;
    }
    nn::Tensor x({batch, kInputs});
    std::vector<std::int32_t> y(batch);
    ds.get_batch(idx, x.span(), y);
    b.features.push_back(std::move(x));
    b.labels.push_back(std::move(y));
  }
  return b;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const std::string& kind, std::vector<nn::Parameter*> params) {
  if (kind == "sgd") {
    nn::SgdOptions o;
    o.lr = 0.01;
    return std::make_unique<nn::Sgd>(std::move(params), o);
  }
  return std::make_unique<nn::AdamW>(std::move(params), nn::AdamWOptions{});
}

struct Row {
  std::string model;
  std::size_t batch = 0;
  bool overlap = true;
  std::size_t buckets = 0;
  double step_ms = 0, samples_per_s = 0, compute_ms = 0, exposed_ms = 0, overhead_ms = 0;
};

struct Options {
  std::size_t steps = 40;
  std::size_t warmup = 5;
  std::size_t repeats = 3;
  std::string optimizer = "adamw";
  double bucket_cap_mb = EngineConfig{}.bucket_cap_mb;
  double first_bucket_mb = EngineConfig{}.first_bucket_mb;
  DType grad_comm_dtype = DType::f32;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::default_;
};

// One model trained by an engine with one overlap setting, and its timings.
struct Trained {
  nn::Sequential model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<Engine> engine;  // declared last: released before the model it points into
  std::vector<double> step_s, exposed_s;
};

// Returns a row per overlap setting; the bare (engine-free) steps and the engines' steps run
// in interleaved blocks, so that every column sees the same machine load.
std::vector<Row> run(const Communicator& comm, const Model& m, const std::vector<bool>& overlaps,
                     const Options& opts) {
  const Batches data = make_batches(m.batch, comm.rank());
  nn::Sequential bare = nn::make_mlp(kInputs, m.hidden, kClasses);
  bare.set_requires_input_grad(false);  // as the engine sets its model
  auto bare_opt = make_optimizer(opts.optimizer, bare.parameters());
  // All models are built before any is prepared: the engines point into them, so the
  // vector must not move them afterwards.
  std::vector<Trained> runs;
  runs.reserve(overlaps.size());
  for (std::size_t i = 0; i < overlaps.size(); ++i) {
    runs.push_back(Trained{nn::make_mlp(kInputs, m.hidden, kClasses), nullptr, nullptr, {}, {}});
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    Trained& t = runs[i];
    t.optimizer = make_optimizer(opts.optimizer, t.model.parameters());
    EngineConfig config;
    config.overlap = overlaps[i];
    config.bucket_cap_mb = opts.bucket_cap_mb;
    config.first_bucket_mb = opts.first_bucket_mb;
    config.grad_comm_dtype = opts.grad_comm_dtype;
    config.allreduce_algorithm = opts.algorithm;
    t.engine = std::make_unique<Engine>(config, comm);
    t.engine->prepare(t.model, *t.optimizer);
  }

  nn::Tensor grad;
  std::vector<double> compute_s;
  std::size_t k = 0;
  auto engine_step = [&](Trained& t) {
    const auto t0 = Clock::now();
    nn::Tensor logits = t.model.forward(data.features[k % kBatches]);
    nn::cross_entropy(logits, data.labels[k % kBatches], grad);
    t.engine->backward(grad);
    t.engine->step();
    t.engine->zero_grad();
    ++k;
    return seconds_since(t0);
  };
  auto bare_step = [&] {
    const auto t0 = Clock::now();
    nn::Tensor logits = bare.forward(data.features[k % kBatches]);
    nn::cross_entropy(logits, data.labels[k % kBatches], grad);
    bare.backward(grad);
    bare_opt->step();
    bare_opt->zero_grad();
    ++k;
    return seconds_since(t0);
  };
  for (std::size_t i = 0; i < opts.warmup; ++i) {
    bare_step();
    for (Trained& t : runs) engine_step(t);
  }
  const Engine& any = *runs.front().engine;
  for (std::size_t r = 0; r < opts.repeats; ++r) {
    any.wait_for_everyone();
    for (std::size_t i = 0; i < opts.steps; ++i) compute_s.push_back(bare_step());
    for (Trained& t : runs) {
      t.engine->wait_for_everyone();
      for (std::size_t i = 0; i < opts.steps; ++i) {
        t.step_s.push_back(engine_step(t));
        t.exposed_s.push_back(t.engine->last_backward().comm_wait_seconds);
      }
    }
  }
  const double compute_ms = 1e3 * any.reduce(median(compute_s), ReduceOp::max);
  std::vector<Row> rows;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    Trained& t = runs[i];
    Row row;
    row.model = m.name;
    row.batch = m.batch;
    row.overlap = overlaps[i];
    row.buckets = t.engine->gradient_sync()->buckets().size();
    row.step_ms = 1e3 * t.engine->reduce(median(t.step_s), ReduceOp::max);
    row.compute_ms = compute_ms;
    row.exposed_ms = 1e3 * t.engine->reduce(median(t.exposed_s), ReduceOp::max);
    row.overhead_ms = row.step_ms - row.compute_ms - row.exposed_ms;
    row.samples_per_s = static_cast<double>(static_cast<std::size_t>(comm.size()) * m.batch) /
                        (row.step_ms * 1e-3);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    MpiRuntime runtime(&argc, &argv);
    Communicator comm(runtime);

    CLI::App app{"train_bench: data-parallel training throughput of the Engine"};
    Options opts;
    std::string model = "all";
    std::string overlap = "both";
    std::size_t blas = 0;
    std::string json_path;
    app.add_option("--steps", opts.steps, "timed steps per block")->check(CLI::PositiveNumber);
    app.add_option("--warmup", opts.warmup, "untimed steps first");
    app.add_option("--repeats", opts.repeats, "blocks of compute-only and engine steps")
        ->check(CLI::PositiveNumber);
    app.add_option("--model", model, "small | large | all")->check(CLI::IsMember({"small", "large", "all"}));
    app.add_option("--overlap", overlap, "on | off | both")->check(CLI::IsMember({"on", "off", "both"}));
    app.add_option("--optimizer", opts.optimizer, "adamw | sgd")->check(CLI::IsMember({"adamw", "sgd"}));
    app.add_option("--bucket-cap-mb", opts.bucket_cap_mb, "gradient bucket cap, MiB");
    app.add_option("--first-bucket-mb", opts.first_bucket_mb, "first bucket cap, MiB");
    std::string comm_dtype = "f32";
    app.add_option("--grad-comm-dtype", comm_dtype, "f32 | bf16 | f16 on the wire")
        ->check(CLI::IsMember({"f32", "bf16", "f16"}));
    std::string algo = "default";
    app.add_option("--algo", algo, "allreduce algorithm: default | mpi | ring");
    app.add_option("--blas-threads", blas, "BLAS threads per rank (0: cores / ranks on node)");
    app.add_option("--json", json_path, "also write the rows as JSON");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return comm.rank() == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    }

    opts.grad_comm_dtype = parse_dtype(comm_dtype);
    opts.algorithm = parse_allreduce_algorithm(algo);
    const std::size_t threads =
        blas > 0 ? blas : nn::default_blas_threads(static_cast<std::size_t>(comm.local_size()));
    nn::set_blas_threads(threads);

    std::vector<Model> models;
    if (model != "large") models.push_back({"784-256-256-10", {256, 256}, 64});
    if (model != "small") models.push_back({"784-1024-1024-10", {1024, 1024}, 128});
    std::vector<bool> overlaps;
    if (overlap != "off") overlaps.push_back(true);
    if (overlap != "on") overlaps.push_back(false);

    if (comm.rank() == 0) {
      std::printf("# train_bench: %d rank(s) on %d node(s), %zu BLAS thread(s) per rank, %s, "
                  "buckets %g MiB (first %g), gradients as %s (%s), %zu x %zu timed steps\n",
                  comm.size(), comm.node_count(), threads, opts.optimizer.c_str(),
                  opts.bucket_cap_mb, opts.first_bucket_mb,
                  std::string(to_string(opts.grad_comm_dtype)).c_str(),
                  std::string(to_string(opts.algorithm)).c_str(), opts.repeats, opts.steps);
      std::printf("%-18s %6s %8s %8s %9s %11s %11s %11s %12s %9s\n", "model", "batch", "overlap",
                  "buckets", "step_ms", "samples/s", "compute_ms", "exposed_ms", "overhead_ms",
                  "overhead%");
      std::fflush(stdout);
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const Model& m : models) {
      for (const Row& r : run(comm, m, overlaps, opts)) {
        if (comm.rank() == 0) {
          std::printf("%-18s %6zu %8s %8zu %9.3f %11.1f %11.3f %11.3f %12.3f %8.1f%%\n",
                      r.model.c_str(), r.batch, r.overlap ? "on" : "off", r.buckets, r.step_ms,
                      r.samples_per_s, r.compute_ms, r.exposed_ms, r.overhead_ms,
                      100.0 * r.overhead_ms / r.step_ms);
          std::fflush(stdout);
        }
        rows.push_back({{"model", r.model}, {"batch_per_rank", r.batch}, {"overlap", r.overlap},
                        {"buckets", r.buckets}, {"step_ms", r.step_ms},
                        {"samples_per_s", r.samples_per_s}, {"compute_ms", r.compute_ms},
                        {"exposed_comm_ms", r.exposed_ms}, {"overhead_ms", r.overhead_ms}});
      }
    }
    if (comm.rank() == 0 && !json_path.empty()) {
      std::ofstream out(json_path);
      out << nlohmann::json{{"world_size", comm.size()}, {"blas_threads", threads},
                            {"optimizer", opts.optimizer}, {"bucket_cap_mb", opts.bucket_cap_mb},
                            {"first_bucket_mb", opts.first_bucket_mb},
                            {"grad_comm_dtype", to_string(opts.grad_comm_dtype)}, {"rows", rows}}
                 .dump(2)
          << "\n";
      if (!out) throw std::runtime_error("cannot write " + json_path);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.what());
    return 1;
  }
}
