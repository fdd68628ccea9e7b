#pragma once
// Evaluation over a whole test set, shared by training (after every epoch) and
// `trainer eval`, so both report the same figures for the same weights at any world size.

#include <cstdint>
#include <functional>

#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/engine/engine.hpp"
#include "external_model.hpp"
#include "mpitrain/nn/module.hpp"
#include "objective.hpp"

namespace mpitrain::app {

struct EvalResult {
  double loss = 0.0;
  double metric = 0.0;  // the objective's, a mean over examples (mlp: accuracy in [0, 1])
  std::int64_t samples = 0;
};

// Returns the mean loss and metric over the whole test set. Every rank scores its shard; the
// real examples' (loss, metric) rows are gathered once at the end with gather_for_metrics,
// so each test example counts exactly once whatever the padding, and ranks with different
// batch counts (even_batches: false) still meet in one collective. `on_batch`, when given, is
// called with the number of this rank's batches scored so far (the progress display).
// Collective. Cost: one forward pass over the rank's shard, one gather of 2 floats per example.
EvalResult evaluate(Engine& engine, nn::Module& model, const Objective& objective, data::DataLoader& loader,
                    const std::function<void(std::int64_t)>& on_batch = {});
// The same for a model trained as an ExternalModel (its output(), in evaluation mode).
EvalResult evaluate(Engine& engine, ExternalModel& model, const Objective& objective, data::DataLoader& loader,
                    const std::function<void(std::int64_t)>& on_batch = {});

}  // namespace mpitrain::app
