#include "eval_command.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "checkpoint_argument.hpp"
#include "config_checked.hpp"
#include "datasets_from_config.hpp"
#include "engine_from_config.hpp"
#include "evaluation.hpp"
#include "model_from_config.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/checkpoint/load_model.hpp"
#include "mpitrain/checkpoint/state_file.hpp"
#include "mpitrain/engine/model_weights.hpp"
#include "optimizer_from_config.hpp"

namespace mpitrain::app {
namespace {

void report(const std::filesystem::path& path, const Model& model, const EvalResult& r, const Communicator& comm,
            Log& log) {
  if (comm.rank() == 0) {
    log.info("eval {}: test {}, loss {:.4f} ({} examples, {} rank{})", path.string(),
             model.objective->describe_metric(r.metric), r.loss, r.samples, comm.size(), comm.size() == 1 ? "" : "s");
  }
}

// Returns the weights of `path` (checkpoint::read_model) and, for a checkpoint folder, its
// fp32 /buffers too (BatchNorm statistics: model.h5 holds them beside the weights).
std::map<std::string, Tensor> read_weights_and_buffers(const std::filesystem::path& path) {
  std::map<std::string, Tensor> weights = checkpoint::read_model(path);  // verifies a checkpoint
  if (!std::filesystem::is_directory(path)) return weights;
  const checkpoint::H5File h5 = checkpoint::H5File::open_read_only(path / "state.h5");
  checkpoint::StateFileContents contents = checkpoint::read_state_file(h5);
  const auto buffers = contents.replicated.find("buffers");
  if (buffers != contents.replicated.end()) {
    for (auto& [name, tensor] : buffers->second.tensors) weights.emplace(name, std::move(tensor));
  }
  return weights;
}

// eval_command of an ExternalModel (torchscript): prepared on the engine (its optimizer is
// never stepped), filled with the checkpoint's weights, taken off the engine at the end.
EvalOutcome eval_external(const TrainConfig& config, const std::filesystem::path& path, const DataSets& sets,
                          Model& model, const Communicator& comm, Log& log) {
  Engine engine(config_checked("config", [&] { return engine_config(config); }), comm);
  const LearningRate lr(config.optimizer.lr);
  struct Unprepare {
    ExternalModel& m;
    ~Unprepare() { m.unprepare(); }
  } unprepare{*model.external};
  model.external->prepare(engine, lr);
  model.external->load_weights(read_weights_and_buffers(path), path);
  data::DataLoader loader = engine.make_loader(sets.test, test_loader_options(config));
  const EvalResult r = evaluate(engine, *model.external, *model.objective, loader);
  report(path, model, r, comm, log);
  return {r.metric, r.loss, r.samples};
}

}  // namespace

EvalOutcome eval_command(const TrainConfig& config, const std::string& argument, const Communicator& comm,
                         Log& log) {
  const std::filesystem::path path = resolve_checkpoint_argument(config, argument);
  const DataSets sets = make_datasets(config);
  if (!sets.test) throw ConfigError("data.test: trainer eval needs a test set");
  Model model = make_model(config, sets.test->feature_size(), sets.num_classes);
  if (model.external) return eval_external(config, path, sets, model, comm, log);
  load_model(path, *model.module);
  // The engine gives the shards, the precision and gather_for_metrics; the optimizer only
  // completes prepare() (its state is never read or stepped).
  const std::unique_ptr<nn::Optimizer> optimizer = make_optimizer(config, model.module->parameters());
  Engine engine(config_checked("config", [&] { return engine_config(config); }), comm);
  engine.prepare(*model.module, *optimizer);
  data::DataLoader loader = engine.make_loader(sets.test, test_loader_options(config));
  const EvalResult r = evaluate(engine, *model.module, *model.objective, loader);
  report(path, model, r, comm, log);
  return {r.metric, r.loss, r.samples};
}

}  // namespace mpitrain::app
