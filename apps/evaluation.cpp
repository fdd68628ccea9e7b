#include "evaluation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace mpitrain::app {
namespace {

// evaluate() of a model given by its forward and its switch between evaluation and training.
EvalResult evaluate_forward(Engine& engine, const std::function<Tensor(const data::Batch&)>& forward,
                            const std::function<void(bool)>& set_training, const Objective& objective,
                            data::DataLoader& loader, const std::function<void(std::int64_t)>& on_batch) {
  set_training(false);
  loader.set_epoch(0);
  std::vector<float> rows;  // (examples, 2): loss, metric
  data::Batch batch;
  for (std::int64_t done = 1; loader.next(batch); ++done) {
    objective.score(forward(batch), batch, rows);
    if (on_batch) on_batch(done);
  }
  set_training(true);
  Tensor mine({rows.size() / 2, 2});
  std::copy(rows.begin(), rows.end(), mine.data());
  const Tensor all = engine.gather_for_metrics(mine, mine.dim(0));
  EvalResult result;
  result.samples = static_cast<std::int64_t>(all.dim(0));
  double loss = 0.0, metric = 0.0;
  for (std::size_t i = 0; i < all.dim(0); ++i) {
    loss += all.data()[2 * i];
    metric += all.data()[2 * i + 1];
  }
  if (result.samples > 0) {
    result.loss = loss / static_cast<double>(result.samples);
    result.metric = metric / static_cast<double>(result.samples);
  }
  if (static_cast<std::size_t>(result.samples) != loader.dataset().size()) {
    throw std::logic_error(fmt::format("evaluation counted {} examples of a test set of {}", result.samples,
                                       loader.dataset().size()));
  }
  return result;
}

}  // namespace

EvalResult evaluate(Engine& engine, nn::Module& model, const Objective& objective, data::DataLoader& loader,
                    const std::function<void(std::int64_t)>& on_batch) {
  return evaluate_forward(
      engine, [&](const data::Batch& batch) { return model.forward(batch.features); },
      [&](bool training) { model.train(training); }, objective, loader, on_batch);
}

EvalResult evaluate(Engine& engine, ExternalModel& model, const Objective& objective, data::DataLoader& loader,
                    const std::function<void(std::int64_t)>& on_batch) {
  return evaluate_forward(
      engine, [&](const data::Batch& batch) { return model.output(batch); },
      [&](bool training) { model.set_training(training); }, objective, loader, on_batch);
}

}  // namespace mpitrain::app
