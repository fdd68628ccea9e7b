#include "eval_command.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "checkpoint_argument.hpp"
#include "config_checked.hpp"
#include "datasets_from_config.hpp"
#include "engine_from_config.hpp"
#include "evaluation.hpp"
#include "model_from_config.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/engine/model_weights.hpp"
#include "optimizer_from_config.hpp"

namespace mpitrain::app {

EvalOutcome eval_command(const TrainConfig& config, const std::string& argument, const Communicator& comm,
                         Log& log) {
  const std::filesystem::path path = resolve_checkpoint_argument(config, argument);
  const DataSets sets = make_datasets(config);
  if (!sets.test) throw ConfigError("data.test: trainer eval needs a test set");
  Model model = make_model(config, sets.test->feature_size(), sets.num_classes);
  if (model.external) {
    throw ConfigError(config.origin("model.kind") + ": model.kind: trainer eval evaluates mlp models only; a " +
                      config.model.kind + " run reports its test figures after every epoch (metrics.jsonl)");
  }
  load_model(path, *model.module);
  // The engine gives the shards, the precision and gather_for_metrics; the optimizer only
  // completes prepare() (its state is never read or stepped).
  const std::unique_ptr<nn::Optimizer> optimizer = make_optimizer(config, model.module->parameters());
  Engine engine(config_checked("config", [&] { return engine_config(config); }), comm);
  engine.prepare(*model.module, *optimizer);
  data::DataLoader loader = engine.make_loader(sets.test, test_loader_options(config));
  const EvalResult r = evaluate(engine, *model.module, *model.objective, loader);
  if (comm.rank() == 0) {
    log.info("eval {}: test {}, loss {:.4f} ({} examples, {} rank{})", path.string(),
             model.objective->describe_metric(r.metric), r.loss, r.samples, comm.size(), comm.size() == 1 ? "" : "s");
  }
  return {r.metric, r.loss, r.samples};
}

}  // namespace mpitrain::app
