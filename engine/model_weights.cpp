#include "mpitrain/engine/model_weights.hpp"

#include <stdexcept>
#include <vector>

#include "mpitrain/checkpoint/load_model.hpp"

namespace mpitrain {

void load_model(const std::filesystem::path& path, std::span<nn::Parameter* const> params) {
  std::vector<checkpoint::WeightsSlot> slots;
  slots.reserve(params.size());
  for (nn::Parameter* p : params) {
    if (p == nullptr) throw std::invalid_argument("load_model: null parameter");
    slots.push_back({p->name, &p->value});
  }
  checkpoint::load_model(path, slots);
}

void load_model(const std::filesystem::path& path, nn::Module& model) {
  const std::vector<nn::Parameter*> params = model.parameters();
  load_model(path, params);
}

std::filesystem::path save_model(const std::filesystem::path& dir, nn::Module& model,
                                 checkpoint::ModelFormat format) {
  const std::vector<nn::Parameter*> params = model.parameters();
  return checkpoint::save_model(dir, nn::named_tensors(params), format);
}

}  // namespace mpitrain
