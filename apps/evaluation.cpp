#include "evaluation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace mpitrain::app {

EvalResult evaluate(Engine& engine, nn::Module& model, const Objective& objective, data::DataLoader& loader,
                    const std::function<void(std::int64_t)>& on_batch) {
  model.train(false);
  loader.set_epoch(0);
  std::vector<float> rows;  // (examples, 2): loss, metric
  data::Batch batch;
  for (std::int64_t done = 1; loader.next(batch); ++done) {
    objective.score(model.forward(batch.features), batch, rows);
    if (on_batch) on_batch(done);
  }
  model.train(true);
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

}  // namespace mpitrain::app
