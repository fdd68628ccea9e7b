#pragma once
// Weights of an nn::Module in and out, without an Engine: a model's parameters filled from a
// saved model file (.h5 or .safetensors, as save_model writes them and PyTorch reads them) or
// from a trainer/engine checkpoint folder, for evaluation or inference in a program of one's
// own. No training loader, optimizer or scheduler is needed (Engine::load_state needs all
// the state a checkpoint holds; this reads only its /model group). The checks and errors are
// checkpoint::load_model's (checkpoint/load_model.hpp): names and shapes must match exactly.
// Not collective.

#include <filesystem>
#include <span>

#include "mpitrain/checkpoint/save_model.hpp"
#include "mpitrain/nn/module.hpp"
#include "mpitrain/nn/parameter.hpp"

namespace mpitrain {

// Fills `params` (by their names) from `path`: a .h5 or .safetensors file, or a committed
// checkpoint folder (checkpoint_<N>, verified against its manifest first).
void load_model(const std::filesystem::path& path, std::span<nn::Parameter* const> params);
// Same, for every parameter of `model`.
void load_model(const std::filesystem::path& path, nn::Module& model);

// Returns the written file: `model`'s parameters saved as checkpoint::save_model does.
std::filesystem::path save_model(const std::filesystem::path& dir, nn::Module& model,
                                 checkpoint::ModelFormat format);

}  // namespace mpitrain
