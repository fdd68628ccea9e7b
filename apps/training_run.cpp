#include "training_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "checkpoint_folders.hpp"
#include "datasets_from_config.hpp"
#include "metrics_log.hpp"
#include "mpitrain/checkpoint/checkpoint_layout.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"
#include "progress.hpp"

namespace mpitrain::app {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Returns `f()`, turning std::invalid_argument (a library's complaint about a setting) into
// a ConfigError that names the config key.
template <class F>
auto config_checked(std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string(key) + ": " + e.what());
  }
}

EngineConfig engine_config(const TrainConfig& c) {
  EngineConfig e;
  e.gradient_accumulation_steps = static_cast<std::size_t>(c.training.gradient_accumulation_steps);
  e.mixed_precision = parse_precision(c.training.mixed_precision);
  e.nan_policy = parse_nan_policy(c.training.nan_policy);
  e.bucket_cap_mb = c.distributed.bucket_cap_mb;
  e.first_bucket_mb = c.distributed.first_bucket_mb;
  e.overlap = c.distributed.overlap;
  const std::string& wire = c.distributed.grad_comm_dtype;
  e.grad_comm_dtype = wire == "bf16" ? DType::bf16 : wire == "fp16" ? DType::f16 : DType::f32;
  e.split_batches = c.data.split_batches;
  e.even_batches = c.data.even_batches;
  e.seed = static_cast<std::uint64_t>(c.seed);
  e.project.project_dir = c.project.dir;
  e.project.automatic_checkpoint_naming = c.project.automatic_checkpoint_naming;
  if (c.project.total_limit) e.project.total_limit = static_cast<std::size_t>(*c.project.total_limit);
  return e;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainConfig& c, std::vector<nn::Parameter*> params) {
  const auto& o = c.optimizer;
  if (o.kind == "sgd") {
    nn::SgdOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    s.nesterov = o.nesterov;
    return config_checked("optimizer", [&] { return std::make_unique<nn::Sgd>(std::move(params), s); });
  }
  nn::AdamWOptions a;
  a.lr = o.lr;
  a.betas = {o.betas.at(0), o.betas.at(1)};
  a.eps = o.eps;
  a.weight_decay = o.weight_decay;
  return config_checked("optimizer", [&] { return std::make_unique<nn::AdamW>(std::move(params), a); });
}

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;
  std::int64_t samples = 0;
};

// Returns the mean loss and accuracy over the whole test set. Every rank evaluates its shard;
// the real examples' (loss, correct) rows are gathered once at the end with
// gather_for_metrics, so each test example counts exactly once whatever the padding, and
// ranks with different batch counts (even_batches: false) still meet in one collective.
EvalResult evaluate(Engine& engine, nn::Module& model, data::DataLoader& loader) {
  model.train(false);
  loader.set_epoch(0);
  std::vector<float> rows;  // (examples, 2): loss, correct
  data::Batch batch;
  while (loader.next(batch)) {
    const Tensor logits = model.forward(batch.features);  // (batch, classes)
    const std::size_t classes = logits.dim(1);
    for (std::size_t r = 0; r < batch.real_count; ++r) {
      const float* z = logits.data() + r * classes;
      const std::size_t best = static_cast<std::size_t>(std::max_element(z, z + classes) - z);
      double sum = 0.0;
      for (std::size_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(z[k] - z[best]));
      const auto label = static_cast<std::size_t>(batch.labels[r]);
      rows.push_back(static_cast<float>(std::log(sum) + static_cast<double>(z[best] - z[label])));
      rows.push_back(best == label ? 1.0f : 0.0f);
    }
  }
  model.train(true);
  Tensor mine({rows.size() / 2, 2});
  std::copy(rows.begin(), rows.end(), mine.data());
  const Tensor all = engine.gather_for_metrics(mine, mine.dim(0));
  EvalResult result;
  result.samples = static_cast<std::int64_t>(all.dim(0));
  double loss = 0.0, correct = 0.0;
  for (std::size_t i = 0; i < all.dim(0); ++i) {
    loss += all.data()[2 * i];
    correct += all.data()[2 * i + 1];
  }
  if (result.samples > 0) {
    result.loss = loss / static_cast<double>(result.samples);
    result.accuracy = correct / static_cast<double>(result.samples);
  }
  if (static_cast<std::size_t>(result.samples) != loader.dataset().size()) {
    throw std::logic_error("evaluation counted " + std::to_string(result.samples) +
                           " examples of a test set of " + std::to_string(loader.dataset().size()));
  }
  return result;
}

// Returns "a, b, c" of the first few names, and how many more there are.
std::string name_list(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 5;
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > kShown) text += " and " + std::to_string(names.size() - kShown) + " more";
  return text;
}

// Returns why a save of this run would find its folder taken, or "" when none would: the
// checkpoints after the one resumed from (automatic naming continues at its number + 1),
// or step_<S> folders after the current step (naming off). Checkpoints are never
// overwritten, so without this check such a run would train and then fail at its first save.
std::string folders_in_the_way(const TrainConfig& config, const checkpoint::CheckpointManager& manager,
                               std::int64_t step) {
  const fs::path dir = manager.checkpoints_dir();
  std::vector<std::string> names;
  if (config.project.automatic_checkpoint_naming) {
    const std::int64_t next = manager.next_iteration();
    for (const checkpoint::CheckpointInfo& info : manager.in_the_way()) {
      names.push_back(info.dir.filename().string());
    }
    if (names.empty()) return "";
    return config.origin("project.resume") + ": project.resume: " + config.project.resume +
           " is not the newest checkpoint of " + dir.string() + ": " + name_list(names) +
           (names.size() == 1 ? " comes" : " come") + " after it, and this run would save " +
           checkpoint::checkpoint_folder_name(next) +
           " next (checkpoints are never overwritten). Remove the newer checkpoints to continue "
           "from this one, or resume from latest";
  }
  std::string newest;
  for (const CheckpointFolder& f : step_folders(dir)) {
    if (f.number > step) names.push_back(f.dir.filename().string());
    if (f.committed) newest = f.dir.string();
  }
  if (names.empty()) return "";
  return config.origin("project.automatic_checkpoint_naming") +
         ": project.automatic_checkpoint_naming: false saves " + (dir / "step_<S>").string() +
         " for steps after " + std::to_string(step) + ", and " + name_list(names) +
         (names.size() == 1 ? " exists" : " exist") +
         " already (checkpoints are never overwritten). Remove " + (names.size() == 1 ? "it" : "them") +
         ", choose another project.dir" +
         (newest.empty() ? std::string() : ", or resume from the newest (project.resume: " + newest + ")");
}

}  // namespace

TrainingOutcome run_training(const TrainConfig& config, const Communicator& comm,
                             const StopSignal& stop, Watchdog& watchdog, std::FILE* out,
                             const InjectedFault& fault) {
  const bool main = comm.rank() == 0;
  const auto started = Clock::now();
  char line[512];
  watchdog.progress("loading the data sets");
  const DataSets sets = make_datasets(config);

  // Everything the engine refers to is declared before it, so it outlives the engine.
  std::vector<std::size_t> hidden(config.model.hidden.begin(), config.model.hidden.end());
  nn::Sequential model = config_checked("model", [&] {
    return nn::make_mlp(sets.train->feature_size(), hidden, sets.num_classes,
                        nn::parse_activation(config.model.activation),
                        static_cast<float>(config.model.dropout),
                        static_cast<std::uint64_t>(config.seed));
  });
  std::unique_ptr<nn::Optimizer> optimizer = make_optimizer(config, model.parameters());
  std::optional<nn::LrScheduler> scheduler;
  std::optional<data::DataLoader> train_loader;
  std::optional<data::DataLoader> test_loader;

  Engine engine(config_checked("config", [&] { return engine_config(config); }), comm);

  data::DataLoaderOptions train_options;
  train_options.batch_size = static_cast<std::size_t>(config.data.batch_size);
  train_options.shuffle = config.data.shuffle;
  train_options.seed = static_cast<std::uint64_t>(config.seed);
  train_options.drop_last = config.data.drop_last;
  train_loader.emplace(config_checked("data.batch_size", [&] {
    return engine.make_loader(sets.train, train_options);
  }));
  const auto batches = static_cast<std::int64_t>(train_loader->batches_per_epoch());
  if (batches == 0) {
    throw ConfigError("data: " + sets.train->describe() + " gives no batch per epoch (batch_size " +
                      std::to_string(config.data.batch_size) + " with drop_last on " +
                      std::to_string(comm.size()) + " ranks)");
  }
  const std::int64_t accumulation = config.training.gradient_accumulation_steps;
  const std::int64_t steps_per_epoch = (batches + accumulation - 1) / accumulation;
  std::int64_t total = config.training.epochs * steps_per_epoch;
  if (config.training.max_steps) total = std::min(total, *config.training.max_steps);
  scheduler.emplace(config_checked("scheduler", [&] {
    return nn::make_scheduler(config.scheduler.kind, *optimizer, config.scheduler.warmup_steps, total);
  }));
  config_checked("data", [&] { engine.prepare(model, *optimizer, *train_loader, &*scheduler); });
  engine.set_config_text(config.yaml);
  if (sets.test && config.training.eval) {
    data::DataLoaderOptions test_options = train_options;
    test_options.shuffle = false;
    test_options.drop_last = false;
    test_loader.emplace(engine.make_loader(sets.test, test_options));
  }

  const fs::path project_dir = config.project.dir;
  std::optional<MetricsLog> metrics;
  if (main) {
    fs::create_directories(project_dir);
    metrics.emplace((project_dir / "metrics.jsonl").string());
  }
  Progress progress(total, config.training.log_every, out);
  const auto say = [&](const char* text) {
    if (main) progress.message(text);
  };
  std::snprintf(line, sizeof line,
                "mpitrain: %d rank%s on %d node%s; train %s (%lld batches of %lld per rank and epoch); "
                "%lld steps (%lld per epoch)",
                comm.size(), comm.size() == 1 ? "" : "s", comm.node_count(),
                comm.node_count() == 1 ? "" : "s", sets.train->describe().c_str(),
                static_cast<long long>(batches), static_cast<long long>(config.data.batch_size),
                static_cast<long long>(total), static_cast<long long>(steps_per_epoch));
  say(line);

  // The checkpoint manager, first: creating it is collective and removes the folders that
  // interrupted saves left behind, so that happens now rather than at the first save.
  watchdog.progress("cleaning up the checkpoint folder");
  const checkpoint::CheckpointManager& manager = engine.checkpoints();
  for (const fs::path& removed : manager.removed_at_start()) {
    say(("removed an abandoned checkpoint folder: " + removed.string()).c_str());
  }

  // Resume.
  watchdog.progress("resuming");
  const std::string& resume = config.project.resume;
  if (resume == "latest") {
    double found = 0.0;
    if (main) found = manager.latest() ? 1.0 : 0.0;
    if (engine.reduce(found, ReduceOp::max) > 0.0) {
      engine.load_state();
    } else {
      say("resume: latest: no checkpoint yet, starting from scratch");
    }
  } else if (resume != "none") {
    engine.load_state(fs::path(resume));
  }
  // Rank 0 looks (every rank sees the same shared folder) and speaks for all.
  std::string in_the_way;
  if (main) in_the_way = folders_in_the_way(config, manager, static_cast<std::int64_t>(engine.step_count()));
  if (engine.reduce(in_the_way.empty() ? 0.0 : 1.0, ReduceOp::max) > 0.0) throw ConfigError(in_the_way);
  if (engine.step_count() > 0 || engine.batches_in_epoch() > 0) {
    std::snprintf(line, sizeof line, "resumed at step %llu (epoch %llu, batch %llu of the epoch)",
                  static_cast<unsigned long long>(engine.step_count()),
                  static_cast<unsigned long long>(engine.epoch()),
                  static_cast<unsigned long long>(engine.batches_in_epoch()));
    say(line);
  }

  TrainingOutcome outcome;
  auto step_of = [&] { return static_cast<std::int64_t>(engine.step_count()); };
  const std::int64_t resumed_at = step_of();
  std::int64_t last_saved = step_of();
  std::int64_t last_evaluated_epoch = -1;
  const auto save = [&] {
    watchdog.progress("saving the checkpoint of step", step_of());
    const checkpoint::SaveResult r =
        config.project.automatic_checkpoint_naming
            ? engine.save_state()
            : engine.save_state(manager.checkpoints_dir() / step_folder_name(step_of()));
    last_saved = step_of();
    outcome.last_checkpoint = r.dir.string();
    std::snprintf(line, sizeof line, "step %lld: saved %s", static_cast<long long>(step_of()),
                  r.dir.string().c_str());
    say(line);
    for (const std::string& w : r.warnings) say(("warning: " + w).c_str());
  };
  const auto run_eval = [&](std::int64_t epoch) {
    last_evaluated_epoch = epoch;
    if (!test_loader) return;
    watchdog.progress("evaluating after step", step_of());
    const EvalResult r = evaluate(engine, model, *test_loader);
    outcome.test_accuracy = r.accuracy;
    outcome.test_loss = r.loss;
    if (metrics) metrics->write(EvalMetrics{step_of(), epoch, r.loss, r.accuracy, r.samples});
    std::snprintf(line, sizeof line, "epoch %lld: test accuracy %.2f%%, loss %.4f (%lld examples)",
                  static_cast<long long>(epoch), 100.0 * r.accuracy, r.loss,
                  static_cast<long long>(r.samples));
    say(line);
  };

  const auto train_start = Clock::now();
  auto last_log_time = train_start;
  std::uint64_t last_log_samples = engine.samples_seen();
  double loss_sum = 0.0;
  double loss_count = 0.0;
  data::Batch batch;
  Tensor grad;
  while (step_of() < total) {
    watchdog.progress("training step", step_of() + 1);
    if (!engine.next_batch(batch)) {  // the epoch is over; the loader stands at the next one
      ++outcome.epochs_done;
      run_eval(static_cast<std::int64_t>(engine.epoch()) - 1);
      if (static_cast<std::int64_t>(engine.epoch()) >= config.training.epochs) break;
      continue;
    }
    auto micro = engine.accumulate();
    const Tensor logits = model.forward(batch.features);
    loss_sum += nn::cross_entropy(logits, batch.labels, grad);
    loss_count += 1.0;
    engine.backward(grad);
    if (!engine.sync_gradients()) continue;

    const std::int64_t step = step_of() + 1;
    const bool log_now = step % config.training.log_every == 0 || step == total;
    double grad_norm = std::numeric_limits<double>::quiet_NaN();
    if (config.training.max_grad_norm) {
      grad_norm = engine.clip_grad_norm(*config.training.max_grad_norm);
    } else if (log_now) {
      grad_norm = engine.clip_grad_norm(std::numeric_limits<double>::infinity());  // measures only
    }
    const double lr = optimizer->lr();
    const float scale = engine.loss_scale();
    engine.step();
    engine.zero_grad();

    if (log_now) {
      Tensor sums({2});
      sums.data()[0] = static_cast<float>(loss_sum);
      sums.data()[1] = static_cast<float>(loss_count);
      const Tensor total_sums = engine.reduce(sums);
      const double loss = total_sums.data()[0] / std::max(1.0f, total_sums.data()[1]);
      const double interval = seconds_since(last_log_time);
      const double samples_per_s =
          interval > 0 ? static_cast<double>(engine.samples_seen() - last_log_samples) / interval : 0.0;
      if (metrics) {
        metrics->write(TrainMetrics{step, static_cast<std::int64_t>(engine.epoch()), loss, lr, grad_norm,
                                    static_cast<double>(scale),
                                    static_cast<std::int64_t>(engine.state().skipped_steps),
                                    samples_per_s, seconds_since(train_start)});
      }
      if (main) progress.update(static_cast<std::int64_t>(engine.epoch()), step, loss, samples_per_s);
      last_log_time = Clock::now();
      last_log_samples = engine.samples_seen();
      loss_sum = 0.0;
      loss_count = 0.0;
    } else if (main) {
      const double interval = seconds_since(last_log_time);
      progress.update(static_cast<std::int64_t>(engine.epoch()), step, loss_sum / std::max(1.0, loss_count),
                      interval > 0 ? static_cast<double>(engine.samples_seen() - last_log_samples) / interval : 0.0);
    }
    if (fault.rank == comm.rank() && fault.step == step) {
      if (fault.kind == "throw") {
        throw std::runtime_error("injected fault after step " + std::to_string(step));
      }
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // "hang": the watchdog's case
    }
    if (config.project.save_every_steps && step % *config.project.save_every_steps == 0) save();
    // A scheduler's signal may reach some ranks only: stop together, after this step.
    if (engine.reduce(stop.requested() ? 1.0 : 0.0, ReduceOp::max) > 0.0) {
      const std::string cause = stop.signal_number() != 0
                                    ? "signal " + std::to_string(stop.signal_number())
                                    : std::string("a signal received by another rank");
      std::snprintf(line, sizeof line, "stop requested (%s): saving and exiting after step %lld",
                    cause.c_str(), static_cast<long long>(step));
      say(line);
      outcome.stopped_by_signal = true;
      break;
    }
  }
  if (!outcome.stopped_by_signal && step_of() > resumed_at) {
    // The last step consumed the epoch's last batch: that epoch is complete, evaluate it.
    const bool epoch_complete = train_loader->end_of_epoch();
    const auto epoch = static_cast<std::int64_t>(engine.epoch());
    if (epoch_complete && last_evaluated_epoch < epoch) {
      ++outcome.epochs_done;
      run_eval(epoch);
    } else if (last_evaluated_epoch < 0 && test_loader) {
      run_eval(epoch);  // max_steps ended the run mid-epoch: report where it got to
    }
  }
  if (step_of() != last_saved) save();
  if (main) {
    watchdog.progress("writing model.h5");
    progress.finish();
  }
  const fs::path model_file = engine.save_model(project_dir);
  outcome.steps = step_of();
  outcome.seconds = seconds_since(started);
  std::snprintf(line, sizeof line, "%s after %lld steps in %.1f s; weights in %s",
                outcome.stopped_by_signal ? "stopped" : "done", static_cast<long long>(outcome.steps),
                outcome.seconds, model_file.string().c_str());
  say(line);
  return outcome;
}

}  // namespace mpitrain::app
