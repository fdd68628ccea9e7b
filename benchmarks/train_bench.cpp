// train_bench: data-parallel training throughput of the Engine at the launched world size,
// and of the same engine at one rank, measured side by side in the same run.
//
//   mpirun -np N train_bench [--steps N] [--warmup N] [--repeats R] [--model small|large|all]
//                            [--overlap on|off|both] [--optimizer adamw|sgd]
//                            [--precision fp32,bf16,fp16|all] [--grad-comm-dtype f32,bf16,f16|all]
//                            [--bucket-cap-mb MB] [--first-bucket-mb MB] [--blas-threads T]
//                            [--algo default|mpi|ring] [--baseline-one-rank on|off] [--json FILE]
//                            [--check-collectives on|off|both] [--zero-stage 0|1|both]
//
// Models: MLP 784-256-256-10 at batch 64 per rank ("small") and 784-1024-1024-10 at batch 128
// per rank ("large"), ReLU, cross-entropy, AdamW (the trainer's defaults), on synthetic
// batches generated before timing (so the data pipeline is not measured). BLAS threads per
// rank = hardware threads of the node / ranks on the node (--blas-threads overrides).
// Buckets: the engine's defaults (25 MiB, first 1 MiB) unless given.
//
// Axes: --precision (training.mixed_precision: fp32 is "no"; bf16 and fp16 are emulated on
// CPU, fp16 with dynamic loss scaling), --grad-comm-dtype (distributed.grad_comm_dtype, the
// type gradients travel in), --overlap and --check-collectives (distributed.check_collectives:
// the per-step fingerprint comparison, one 16-byte allreduce; "both" measures its cost as two
// rows of the same run, column `check`); the first two take comma-separated lists or
// "all". Every combination of a model gets a row, and all of them run in one process, in
// blocks of --steps steps interleaved round-robin (bare steps of each precision, then, at
// more than one rank, the same in lock-step (see lockstep_ms), then each engine; the order
// rotates every repeat), so that rows compared with each other saw the same machine load.
// After each model's rows, one line per precision and overlap setting
// gives the ratio of exposed communication of each 16-bit wire type to f32, the quantity of
// the goal "bf16 exposed comm <= 0.6x fp32" (784-1024-1024-10 at 2 ranks).
//
// --zero-stage (distributed.zero_stage: 1 shards the optimizer state; "both" gives each
// configuration a stage 0 and a stage 1 row, interleaved like every other row). After each
// model's rows, a line per stage 1 row compares it with its stage 0 twin: the step time ratio
// (goal <= 1.05 at 2 ranks) and the optimizer state per rank, as Engine::memory_report gives it
// and as measured: the growth of this rank's private resident memory (/proc/self/statm,
// resident minus shared pages) over the engine's first Engine::step(), when the optimizer
// allocates its state (each engine takes its first step untimed, before the warm-up; the
// largest growth over ranks is reported).
//
// A step is forward + loss + engine.backward + engine.step + engine.zero_grad. Columns:
//   step_ms       median step time (the slowest rank's median)
//   samples/s     world_size * batch / step_ms
//   compute_ms    median time of the same step without the engine (model.backward,
//                 optimizer.step, zero_grad), in the row's precision, run by every rank at
//                 the same time, in blocks interleaved with the engines' blocks
//   lockstep_ms   median time of the same bare step when every rank waits for the others
//                 after backward, before the optimizer step, as the engine's reduction makes
//                 them (the wait itself excluded; at 1 rank equal to compute_ms): the same
//                 computation in lock-step. The ranks then run their optimizer steps at the
//                 same time, and where the step is bound by memory traffic (AdamW on the large
//                 model) they slow each other down more than free-running ranks do, whose
//                 optimizer steps drift apart; lockstep_ms - compute_ms is that part of
//                 overhead_ms, which the engine's own code does not cost
//   exposed_ms    median time backward waited for the gradient reductions after the model's
//                 backward produced its last gradient ("exposed comm")
//   last_rank_ms  the same wait of the rank that finished its backward last, per step (the
//                 smallest wait over ranks), median over steps: the reductions alone, without
//                 the time an early rank spends waiting for a slower peer
//   overhead_ms   step_ms - compute_ms - exposed_ms: everything else the engine costs (hooks,
//                 launching buckets, the inf/NaN pass, a communication thread competing with
//                 compute for the cores); overhead% = overhead_ms / step_ms
//   wire_MB       bytes of gradients each rank puts into allreduces per step (MiB)
//   skipped       timed steps the fp16 loss scaler skipped (a skipped step has no optimizer
//                 update, so it is cheaper)
//   zero          distributed.zero_stage
//   opt_MB        optimizer state per rank (Engine::memory_report, MiB)
//   rss1_MB       private resident memory growth over the first Engine::step() (MiB, see
//                 --zero-stage)
// Medians are robust on a shared machine; each rank's median is taken over its own steps,
// then the maximum over ranks is reported (last_rank_ms excepted, see above).
//
// 1-rank baseline (--baseline-one-rank, on by default when N > 1): the goal "N ranks reach
// 1.7x the samples/s of 1 rank" compares with one rank measured in the same run, not in
// another mpirun. Rank 0 alone trains each row's model with the row's configuration through
// an Engine over Communicator::self (a world of one: no gradient is sent), with the same
// batch per rank and the same BLAS threads per rank as the N-rank rows, so that the ratio is
// per core: N ranks on N cores against one rank on one core. It also times the bare step of
// each precision alone. These blocks take turns with the N-rank blocks in the same
// round-robin. While rank 0 runs one, the other ranks wait in a nonblocking barrier that
// they test once a millisecond, sleeping in between, so they leave the cores to rank 0
// rather than spin in MPI's progress loop; the time they need to notice the end is outside
// every timed step. After each model's rows, a footer line per row gives:
//   samples/s      the N-rank row's samples/s
//   samples/s@1    batch / step_ms@1, rank 0's median step of the 1-rank engine
//   ratio          samples/s / samples/s@1 = N * step_ms@1 / step_ms (goal >= 1.7 at N = 2)
//   compute_ms@1   rank 0's median bare step alone; compute_x = compute_ms / compute_ms@1 is
//                  how much slower the same computation runs when every rank computes at once
//                  (shared memory bandwidth and caches)
//   exposed_ms, overhead%  the N-rank row's (goal overhead% <= 3)
//   overhead%@1    (step_ms@1 - compute_ms@1) / step_ms@1: the engine's cost with nothing to
//                  send
// so that ratio = N * step_ms@1 / (compute_ms@1 * compute_x + exposed_ms + overhead_ms).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <unistd.h>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/cores_of_this_thread.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"
#include "mpitrain/precision/precision_mode.hpp"

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
  std::vector<Tensor> features;               // (batch, 784)
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
    Tensor x({batch, kInputs});
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
  Precision precision = Precision::fp32;
  DType comm_dtype = DType::f32;
  bool overlap = true;
  bool check = true;
  int zero_stage = 0;
  double opt_mb = 0, rss_first_mb = 0;
  std::size_t buckets = 0;
  double wire_mb = 0;
  std::uint64_t skipped = 0;
  double step_ms = 0, samples_per_s = 0, compute_ms = 0, exposed_ms = 0, overhead_ms = 0;
  double last_rank_ms = 0, lockstep_ms = 0;
  // The 1-rank baseline of this row, measured by rank 0 (zero elsewhere, and when off).
  double one_step_ms = 0, one_samples_per_s = 0, one_compute_ms = 0, one_overhead_ms = 0;
  std::uint64_t one_skipped = 0;
};

struct Options {
  std::size_t steps = 40;
  std::size_t warmup = 5;
  std::size_t repeats = 3;
  std::string optimizer = "adamw";
  double bucket_cap_mb = EngineConfig{}.bucket_cap_mb;
  double first_bucket_mb = EngineConfig{}.first_bucket_mb;
  std::string algorithm{kDefaultAlgorithm};
  std::size_t blas_threads = 1;
  bool baseline_one_rank = false;
};

// One engine configuration of a row.
struct Variant {
  Precision precision = Precision::fp32;
  DType comm_dtype = DType::f32;
  bool overlap = true;
  bool check = true;  // EngineConfig::check_collectives
  int zero_stage = 0;  // EngineConfig::zero_stage
};

// The model trained without an engine in one precision: the compute baseline.
struct Bare {
  Precision precision;
  nn::Sequential model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::vector<double> step_s;
  std::vector<double> lockstep_s;  // steps in lock-step with the other ranks, their wait excluded
};

// One model trained by an engine with one variant, and its timings.
struct Trained {
  Variant variant;
  nn::Sequential model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<Engine> engine;  // declared last: released before the model it points into
  std::vector<double> step_s, exposed_s;
  std::uint64_t skipped = 0;
  double rss_first_bytes = 0;  // private resident memory growth over the first Engine::step()
};

// Returns this process's private resident memory in bytes: resident minus shared pages
// (/proc/self/statm; 0 where unreadable). Shared pages are left out because the node's
// segment holds the gradient buckets, and a rank that reads its peers' buckets (the zero-copy
// collectives) maps their pages too: counted, they would hide the optimizer state.
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0, shared = 0;
  if (!(statm >> pages >> resident >> shared)) return 0.0;
  return (resident - shared) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string precision_name(Precision p) { return p == Precision::fp32 ? "fp32" : std::string(to_string(p)); }

// Returns once every rank has called it, after a block only rank 0 runs (the 1-rank
// baseline). Rank 0 waits inside MPI; the others test a nonblocking barrier once a
// millisecond and sleep in between, so that they leave the cores to rank 0 instead of
// spinning in MPI's progress loop. The engines' communication streams are idle here (every
// step waits for its reductions), so the main thread may use the world communicator.
void wait_for_rank_zero(const Communicator& comm) {
  Request everyone = comm.ibarrier();
  if (comm.rank() == 0) {
    everyone.wait();
    return;
  }
  while (!everyone.test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Returns a bare (engine-free) model per precision of `variants`, in order of appearance.
std::vector<Bare> make_bares(const Model& m, const std::vector<Variant>& variants, const Options& opts) {
  std::vector<Bare> bares;
  for (const Variant& v : variants) {
    const bool have = std::any_of(bares.begin(), bares.end(),
                                  [&](const Bare& b) { return b.precision == v.precision; });
    if (!have) {
      bares.push_back(
          Bare{v.precision, nn::make_mlp(kInputs, m.hidden, kClasses), nullptr, {}, {}});
    }
  }
  for (Bare& b : bares) {
    b.model.set_requires_input_grad(false);  // as the engine sets its model
    b.model.set_precision(b.precision);
    b.optimizer = make_optimizer(opts.optimizer, b.model.parameters());
  }
  return bares;
}

// Returns a prepared engine over `comm` per variant. The vector is complete before any engine
// is prepared: the engines point into its models, which must not move afterwards.
std::vector<Trained> make_engines(const Communicator& comm, const Model& m,
                                  const std::vector<Variant>& variants, const Options& opts) {
  std::vector<Trained> runs;
  runs.reserve(variants.size());
  for (const Variant& v : variants) {
    runs.push_back(Trained{v, nn::make_mlp(kInputs, m.hidden, kClasses), nullptr, nullptr, {}, {}, 0, 0.0});
  }
  for (Trained& t : runs) {
    t.optimizer = make_optimizer(opts.optimizer, t.model.parameters());
    EngineConfig config;
    config.mixed_precision = t.variant.precision;
    config.overlap = t.variant.overlap;
    config.check_collectives = t.variant.check;
    config.grad_comm_dtype = t.variant.comm_dtype;
    config.bucket_cap_mb = opts.bucket_cap_mb;
    config.first_bucket_mb = opts.first_bucket_mb;
    config.allreduce_algorithm = opts.algorithm;
    config.zero_stage = t.variant.zero_stage;
    t.engine = std::make_unique<Engine>(config, comm);
    t.engine->prepare(t.model, *t.optimizer);
  }
  return runs;
}

// Returns a row per variant; the bare (engine-free) steps of each precision and the engines'
// steps run in interleaved blocks, so that every column sees the same machine load. `self`
// (rank 0 only, when opts.baseline_one_rank) is the communicator of the 1-rank baseline.
std::vector<Row> run(const Communicator& comm, const Communicator* self, const Model& m,
                     const std::vector<Variant>& variants, const Options& opts) {
  const Batches data = make_batches(m.batch, comm.rank());
  std::vector<Bare> bares = make_bares(m, variants, opts);
  std::vector<Trained> runs = make_engines(comm, m, variants, opts);
  // The 1-rank baseline: rank 0's own models, the engines over `self` (empty elsewhere).
  std::vector<Bare> bares1;
  std::vector<Trained> runs1;
  if (self != nullptr) {
    bares1 = make_bares(m, variants, opts);
    runs1 = make_engines(*self, m, variants, opts);
  }
  // Whatever an Engine does with the BLAS pool when it is built (an engine over `self` would
  // take every core of the node), the bench's choice holds, the same for both world sizes.
  nn::set_blas_threads(opts.blas_threads);

  Tensor grad;
  std::size_t k = 0;
  // Returns the seconds of one step of `t`; adds the growth of private resident memory over
  // its Engine::step() to *step_growth_bytes when given.
  auto engine_step = [&](Trained& t, double* step_growth_bytes = nullptr) {
    const auto t0 = Clock::now();
    Tensor logits = t.model.forward(data.features[k % kBatches]);
    nn::cross_entropy(logits, data.labels[k % kBatches], grad);
    t.engine->backward(grad);
    const double before = step_growth_bytes != nullptr ? resident_bytes() : 0.0;
    t.engine->step();
    if (step_growth_bytes != nullptr) *step_growth_bytes += resident_bytes() - before;
    t.engine->zero_grad();
    ++k;
    return seconds_since(t0);
  };
  // Returns the seconds of one bare step; in lock-step, every rank first waits for the others
  // after backward, as the engine's reduction makes them, and the wait is not counted.
  auto bare_step = [&](Bare& b, bool lockstep = false) {
    const auto t0 = Clock::now();
    Tensor logits = b.model.forward(data.features[k % kBatches]);
    nn::cross_entropy(logits, data.labels[k % kBatches], grad);
    b.model.backward(grad);
    double waited = 0.0;
    if (lockstep) {
      const auto w0 = Clock::now();
      comm.barrier();  // the engines are idle between steps: the world communicator is free
      waited = seconds_since(w0);
    }
    b.optimizer->step();
    b.optimizer->zero_grad();
    ++k;
    return seconds_since(t0) - waited;
  };
  auto timed_engine_block = [&](Trained& t) {
    const std::uint64_t skipped_before = t.engine->state().skipped_steps;
    for (std::size_t i = 0; i < opts.steps; ++i) {
      t.step_s.push_back(engine_step(t));
      t.exposed_s.push_back(t.engine->last_backward().comm_wait_seconds);
    }
    t.skipped += t.engine->state().skipped_steps - skipped_before;
  };
  // Blocks: [0, bares.size()) are the bare models, then (at more than one rank) the bare
  // models in lock-step, then the engines at the world size, up to world_blocks; with the
  // baseline, the bare models and the engines once more for rank 0 alone (every rank counts
  // them, so that all agree on the schedule).
  const std::size_t lockstep_blocks = comm.size() > 1 ? bares.size() : 0;
  const std::size_t engine_blocks_from = bares.size() + lockstep_blocks;
  const std::size_t world_blocks = engine_blocks_from + runs.size();
  const std::size_t one_rank_blocks = opts.baseline_one_rank ? bares.size() + runs.size() : 0;
  const std::size_t blocks = world_blocks + one_rank_blocks;
  // The optimizers allocate their state in their first step: measured over Engine::step()
  // alone, so that the first forward's and backward's buffers are not counted.
  for (Trained& t : runs) engine_step(t, &t.rss_first_bytes);
  for (std::size_t i = 0; i < opts.warmup; ++i) {
    for (Bare& b : bares) bare_step(b);
    for (Trained& t : runs) engine_step(t);
  }
  if (opts.baseline_one_rank) {
    for (std::size_t i = 0; i < opts.warmup; ++i) {
      for (Bare& b : bares1) bare_step(b);
      for (Trained& t : runs1) engine_step(t);
    }
    wait_for_rank_zero(comm);
  }
  const Engine& any = *runs.front().engine;
  for (std::size_t r = 0; r < opts.repeats; ++r) {
    for (std::size_t j = 0; j < blocks; ++j) {
      const std::size_t block = (j + r) % blocks;
      any.wait_for_everyone();
      if (block < bares.size()) {
        Bare& b = bares[block];
        for (std::size_t i = 0; i < opts.steps; ++i) b.step_s.push_back(bare_step(b));
      } else if (block < engine_blocks_from) {
        Bare& b = bares[block - bares.size()];
        for (std::size_t i = 0; i < opts.steps; ++i) b.lockstep_s.push_back(bare_step(b, true));
      } else if (block < world_blocks) {
        timed_engine_block(runs[block - engine_blocks_from]);
      } else {
        const std::size_t one = block - world_blocks;
        if (self != nullptr && one < bares1.size()) {
          Bare& b = bares1[one];
          for (std::size_t i = 0; i < opts.steps; ++i) b.step_s.push_back(bare_step(b));
        } else if (self != nullptr) {
          timed_engine_block(runs1[one - bares1.size()]);
        }
        wait_for_rank_zero(comm);
      }
    }
  }
  std::vector<Row> rows;
  for (Trained& t : runs) {
    const Bare& bare = *std::find_if(bares.begin(), bares.end(),
                                     [&](const Bare& b) { return b.precision == t.variant.precision; });
    Row row;
    row.model = m.name;
    row.batch = m.batch;
    row.precision = t.variant.precision;
    row.comm_dtype = t.variant.comm_dtype;
    row.overlap = t.variant.overlap;
    row.check = t.variant.check;
    row.zero_stage = t.variant.zero_stage;
    row.opt_mb = t.engine->reduce(static_cast<double>(t.engine->memory_report().optimizer_state_bytes),
                                  ReduceOp::max) / (1024.0 * 1024.0);
    row.rss_first_mb = t.engine->reduce(t.rss_first_bytes, ReduceOp::max) / (1024.0 * 1024.0);
    row.buckets = t.engine->gradient_sync()->buckets().size();
    double wire_bytes = 0.0;
    for (const GradientSync::Bucket& b : t.engine->gradient_sync()->buckets()) {
      wire_bytes += static_cast<double>(b.wire_bytes);
    }
    row.wire_mb = wire_bytes / (1024.0 * 1024.0);
    row.skipped = t.skipped;
    row.step_ms = 1e3 * t.engine->reduce(median(t.step_s), ReduceOp::max);
    row.compute_ms = 1e3 * t.engine->reduce(median(bare.step_s), ReduceOp::max);
    row.lockstep_ms = bare.lockstep_s.empty()
                          ? row.compute_ms
                          : 1e3 * t.engine->reduce(median(bare.lockstep_s), ReduceOp::max);
    row.exposed_ms = 1e3 * t.engine->reduce(median(t.exposed_s), ReduceOp::max);
    // Every rank timed the same number of steps: rank r's waits are all[r * steps + i].
    const std::vector<double> all = t.engine->gather(std::span<const double>(t.exposed_s));
    std::vector<double> last_rank(t.exposed_s.size(), std::numeric_limits<double>::infinity());
    for (std::size_t i = 0; i < all.size(); ++i) {
      double& slot = last_rank[i % last_rank.size()];
      slot = std::min(slot, all[i]);
    }
    row.last_rank_ms = 1e3 * median(last_rank);
    row.overhead_ms = row.step_ms - row.compute_ms - row.exposed_ms;
    row.samples_per_s = static_cast<double>(static_cast<std::size_t>(comm.size()) * m.batch) /
                        (row.step_ms * 1e-3);
    if (self != nullptr) {
      const std::size_t v = static_cast<std::size_t>(&t - runs.data());
      const Trained& one = runs1[v];
      const Bare& bare1 = *std::find_if(bares1.begin(), bares1.end(),
                                        [&](const Bare& b) { return b.precision == t.variant.precision; });
      row.one_step_ms = 1e3 * median(one.step_s);
      row.one_compute_ms = 1e3 * median(bare1.step_s);
      row.one_overhead_ms = row.one_step_ms - row.one_compute_ms;
      row.one_samples_per_s = static_cast<double>(m.batch) / (row.one_step_ms * 1e-3);
      row.one_skipped = one.skipped;
    }
    rows.push_back(row);
  }
  return rows;
}

// Returns the comma-separated values of `list`, "all" replaced by `all`.
std::vector<std::string> split_list(const std::string& list, const std::vector<std::string>& all) {
  if (list == "all") return all;
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    if (std::find(all.begin(), all.end(), item) == all.end()) {
      std::string allowed;
      for (const std::string& a : all) allowed += (allowed.empty() ? "" : ", ") + a;
      throw CLI::ValidationError("'" + item + "' is not one of " + allowed + ", all");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    at = comma + 1;
  }
  return out;
}

// Prints, for each precision and overlap setting of `rows` (one model), the exposed
// communication of each 16-bit wire type relative to f32.
// Prints, for each row with the fingerprint check and its twin without (--check-collectives
// both), the check's cost: the difference of their median step times, in ms and in % of the
// step without it.
void print_check_cost(const std::vector<Row>& rows) {
  for (const Row& on : rows) {
    if (!on.check) continue;
    for (const Row& off : rows) {
      if (off.check || off.precision != on.precision || off.comm_dtype != on.comm_dtype ||
          off.overlap != on.overlap || off.zero_stage != on.zero_stage) {
        continue;
      }
      std::printf("# check_collectives cost  %s %s %s overlap %s: step %.3f ms on, %.3f ms off: "
                  "%+.3f ms = %+.2f%%\n",
                  on.model.c_str(), precision_name(on.precision).c_str(),
                  std::string(to_string(on.comm_dtype)).c_str(), on.overlap ? "on" : "off",
                  on.step_ms, off.step_ms, on.step_ms - off.step_ms,
                  100.0 * (on.step_ms - off.step_ms) / off.step_ms);
    }
  }
}

// Prints, for each stage 1 row and its stage 0 twin (--zero-stage both), the step time ratio
// and the optimizer state per rank, reported and measured.
void print_zero_comparison(const std::vector<Row>& rows) {
  for (const Row& z : rows) {
    if (z.zero_stage != 1) continue;
    for (const Row& o : rows) {
      if (o.zero_stage != 0 || o.precision != z.precision || o.comm_dtype != z.comm_dtype ||
          o.overlap != z.overlap || o.check != z.check) {
        continue;
      }
      std::printf("# zero_stage 1 vs 0  %s %s %s overlap %s: step %.3f / %.3f ms = %.3f (goal <= 1.05); "
                  "optimizer state per rank %.2f / %.2f MiB (memory_report), first-step RSS growth "
                  "%.2f / %.2f MiB (measured)\n",
                  z.model.c_str(), precision_name(z.precision).c_str(),
                  std::string(to_string(z.comm_dtype)).c_str(), z.overlap ? "on" : "off", z.step_ms,
                  o.step_ms, z.step_ms / o.step_ms, z.opt_mb, o.opt_mb, z.rss_first_mb, o.rss_first_mb);
    }
  }
}

void print_ratios(const std::vector<Row>& rows) {
  for (const Row& base : rows) {
    if (base.comm_dtype != DType::f32) continue;
    for (const Row& r : rows) {
      if (r.comm_dtype == DType::f32 || r.precision != base.precision || r.overlap != base.overlap ||
          r.check != base.check || r.zero_stage != base.zero_stage) {
        continue;
      }
      auto ratio = [](double a, double b) { return b > 0.0 ? a / b : 0.0; };
      std::printf("# exposed comm %s/f32  %s %s overlap %s: %.3f / %.3f ms = %.2f"
                  "  (last rank: %.3f / %.3f ms = %.2f)\n",
                  std::string(to_string(r.comm_dtype)).c_str(), r.model.c_str(),
                  precision_name(r.precision).c_str(), r.overlap ? "on" : "off", r.exposed_ms,
                  base.exposed_ms, ratio(r.exposed_ms, base.exposed_ms), r.last_rank_ms,
                  base.last_rank_ms, ratio(r.last_rank_ms, base.last_rank_ms));
    }
  }
}

// Prints, for each row of `rows` (one model), the N-rank throughput against the 1-rank
// baseline measured in the same run, with the terms that decompose their ratio.
void print_scaling(const std::vector<Row>& rows) {
  std::printf("# vs 1 rank (rank 0 alone, Engine over Communicator::self, same batch and BLAS "
              "threads per rank, same run): goals ratio >= 1.7 at 2 ranks, overhead <= 3%%\n");
  std::printf("# %-16s %5s %5s %8s %11s %11s %6s %10s %12s %9s %10s %9s %11s\n", "model", "prec",
              "wire", "overlap", "samples/s", "samples/s@1", "ratio", "step_ms@1", "compute_ms@1",
              "compute_x", "exposed_ms", "overhead%", "overhead%@1");
  for (const Row& r : rows) {
    std::printf("# %-16s %5s %5s %8s %11.1f %11.1f %6.2f %10.3f %12.3f %9.2f %10.3f %8.1f%% %10.1f%%\n",
                r.model.c_str(), precision_name(r.precision).c_str(),
                std::string(to_string(r.comm_dtype)).c_str(), r.overlap ? "on" : "off",
                r.samples_per_s, r.one_samples_per_s, r.samples_per_s / r.one_samples_per_s,
                r.one_step_ms, r.one_compute_ms, r.compute_ms / r.one_compute_ms, r.exposed_ms,
                100.0 * r.overhead_ms / r.step_ms, 100.0 * r.one_overhead_ms / r.one_step_ms);
  }
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
    std::string check = "on";
    std::string zero = "0";
    std::string precision_list = "fp32";
    std::string comm_dtype_list = "f32";
    std::size_t blas = 0;
    std::string json_path;
    app.add_option("--steps", opts.steps, "timed steps per block")->check(CLI::PositiveNumber);
    app.add_option("--warmup", opts.warmup, "untimed steps first");
    app.add_option("--repeats", opts.repeats, "blocks of compute-only and engine steps")
        ->check(CLI::PositiveNumber);
    app.add_option("--model", model, "small | large | all")->check(CLI::IsMember({"small", "large", "all"}));
    app.add_option("--overlap", overlap, "on | off | both")->check(CLI::IsMember({"on", "off", "both"}));
    app.add_option("--check-collectives", check, "per-step collective fingerprint check: on | off | both")
        ->check(CLI::IsMember({"on", "off", "both"}));
    app.add_option("--zero-stage", zero, "distributed.zero_stage: 0 | 1 | both")
        ->check(CLI::IsMember({"0", "1", "both"}));
    app.add_option("--optimizer", opts.optimizer, "adamw | sgd")->check(CLI::IsMember({"adamw", "sgd"}));
    app.add_option("--precision", precision_list,
                   "mixed precision: comma-separated fp32, bf16, fp16, or all");
    app.add_option("--grad-comm-dtype", comm_dtype_list,
                   "gradients on the wire: comma-separated f32, bf16, f16, or all");
    app.add_option("--bucket-cap-mb", opts.bucket_cap_mb, "gradient bucket cap, MiB");
    app.add_option("--first-bucket-mb", opts.first_bucket_mb, "first bucket cap, MiB");
    std::string algo = "default";
    app.add_option("--algo", algo, "allreduce algorithm: default | mpi | ring");
    app.add_option("--blas-threads", blas, "BLAS threads per rank (0: cores / ranks on node)");
    std::string baseline = comm.size() > 1 ? "on" : "off";
    app.add_option("--baseline-one-rank", baseline,
                   "also time each row at 1 rank (rank 0 alone) in the same run, and print the "
                   "ratio: on | off (default: on when more than one rank)")
        ->check(CLI::IsMember({"on", "off"}));
    app.add_option("--json", json_path, "also write the rows as JSON");
    std::vector<std::string> precisions;
    std::vector<std::string> comm_dtypes;
    try {
      app.parse(argc, argv);
      precisions = split_list(precision_list, {"fp32", "bf16", "fp16"});
      comm_dtypes = split_list(comm_dtype_list, {"f32", "bf16", "f16"});
    } catch (const CLI::ParseError& e) {
      // Every rank parses the same arguments, so every rank ends here; only rank 0 talks.
      if (comm.rank() == 0) app.exit(e);
      return e.get_exit_code() == 0 ? 0 : 2;
    }

    require_algorithm(Collective::allreduce, algo);
    opts.algorithm = algo;
    opts.baseline_one_rank = baseline == "on";
    // Rank 0's world of one for the 1-rank baseline (not collective: the others make none).
    std::optional<Communicator> self;
    if (opts.baseline_one_rank && comm.rank() == 0) self.emplace(Communicator::self(runtime));
    opts.blas_threads =
        blas > 0 ? blas : nn::default_blas_threads(static_cast<std::size_t>(comm.local_size()));
    nn::set_blas_threads(opts.blas_threads);

    std::vector<Model> models;
    if (model != "large") models.push_back({"784-256-256-10", {256, 256}, 64});
    if (model != "small") models.push_back({"784-1024-1024-10", {1024, 1024}, 128});
    std::vector<Variant> variants;
    for (const std::string& p : precisions) {
      for (const std::string& d : comm_dtypes) {
        for (const bool c : {true, false}) {
          if (c ? check == "off" : check == "on") continue;
          for (const int z : {0, 1}) {
            if (zero != "both" && zero != std::to_string(z)) continue;
            if (overlap != "off") variants.push_back({parse_precision(p), parse_dtype(d), true, c, z});
            if (overlap != "on") variants.push_back({parse_precision(p), parse_dtype(d), false, c, z});
          }
        }
      }
    }

    if (comm.rank() == 0) {
      // GradientSync's automatic choice for this thread (ReduceOn): what overlap on does here.
      std::printf("# train_bench: %d rank(s) on %d node(s), %zu BLAS thread(s) per rank, %s, "
                  "buckets %g MiB (first %g), allreduce %s, %zu x %zu timed steps per row, "
                  "1-rank baseline %s, overlap on reduces buckets on the %s (rank 0 may run on "
                  "%zu CPU(s))\n",
                  comm.size(), comm.node_count(), opts.blas_threads, opts.optimizer.c_str(),
                  opts.bucket_cap_mb, opts.first_bucket_mb,
                  opts.algorithm.c_str(), opts.repeats, opts.steps,
                  opts.baseline_one_rank ? "on" : "off",
                  cores_of_this_thread() == 1 ? "backward thread" : "communication thread",
                  cores_of_this_thread());
      std::printf("%-18s %6s %5s %5s %8s %6s %8s %8s %9s %11s %11s %11s %11s %13s %12s %9s "
                  "%8s %5s %8s %8s\n",
                  "model", "batch", "prec", "wire", "overlap", "check", "buckets", "wire_MB",
                  "step_ms", "samples/s", "compute_ms", "lockstep_ms", "exposed_ms",
                  "last_rank_ms", "overhead_ms", "overhead%", "skipped", "zero", "opt_MB",
                  "rss1_MB");
      std::fflush(stdout);
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const Model& m : models) {
      const std::vector<Row> model_rows = run(comm, self ? &*self : nullptr, m, variants, opts);
      for (const Row& r : model_rows) {
        if (comm.rank() == 0) {
          std::printf("%-18s %6zu %5s %5s %8s %6s %8zu %8.2f %9.3f %11.1f %11.3f %11.3f "
                      "%11.3f %13.3f %12.3f %8.1f%% %8llu %5d %8.2f %8.2f\n",
                      r.model.c_str(), r.batch, precision_name(r.precision).c_str(),
                      std::string(to_string(r.comm_dtype)).c_str(), r.overlap ? "on" : "off",
                      r.check ? "on" : "off",
                      r.buckets, r.wire_mb, r.step_ms, r.samples_per_s, r.compute_ms,
                      r.lockstep_ms, r.exposed_ms, r.last_rank_ms, r.overhead_ms,
                      100.0 * r.overhead_ms / r.step_ms, static_cast<unsigned long long>(r.skipped),
                      r.zero_stage, r.opt_mb, r.rss_first_mb);
        }
        nlohmann::json row = {{"model", r.model}, {"batch_per_rank", r.batch},
                              {"precision", precision_name(r.precision)},
                              {"grad_comm_dtype", to_string(r.comm_dtype)}, {"overlap", r.overlap},
                              {"check_collectives", r.check},
                              {"buckets", r.buckets}, {"wire_mb", r.wire_mb}, {"step_ms", r.step_ms},
                              {"samples_per_s", r.samples_per_s}, {"compute_ms", r.compute_ms},
                              {"compute_lockstep_ms", r.lockstep_ms},
                              {"exposed_comm_ms", r.exposed_ms},
                              {"last_rank_exposed_ms", r.last_rank_ms},
                              {"overhead_ms", r.overhead_ms}, {"skipped_steps", r.skipped},
                              {"zero_stage", r.zero_stage}, {"optimizer_state_mb", r.opt_mb},
                              {"first_step_rss_mb", r.rss_first_mb}};
        if (opts.baseline_one_rank) {
          row["one_rank"] = {{"step_ms", r.one_step_ms}, {"samples_per_s", r.one_samples_per_s},
                             {"compute_ms", r.one_compute_ms}, {"overhead_ms", r.one_overhead_ms},
                             {"skipped_steps", r.one_skipped}};
          row["scaling_vs_one_rank"] = r.samples_per_s / r.one_samples_per_s;
        }
        rows.push_back(std::move(row));
      }
      if (comm.rank() == 0) {
        print_ratios(model_rows);
        print_check_cost(model_rows);
        print_zero_comparison(model_rows);
        if (opts.baseline_one_rank) print_scaling(model_rows);
        std::fflush(stdout);
      }
    }
    if (comm.rank() == 0 && !json_path.empty()) {
      std::ofstream out(json_path);
      out << nlohmann::json{{"world_size", comm.size()}, {"blas_threads", opts.blas_threads},
                            {"optimizer", opts.optimizer}, {"bucket_cap_mb", opts.bucket_cap_mb},
                            {"first_bucket_mb", opts.first_bucket_mb},
                            {"algo", opts.algorithm},
                            {"baseline_one_rank", opts.baseline_one_rank}, {"rows", rows}}
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
