// ZeRO stage 1 in the engine (distributed.zero_stage = 1): the optimizer copy that steps this
// rank's pieces of the parameters, the optimizer step with the allgather that follows it,
// the agreement on inf/NaN between shards, and the memory report.
//
// Cost per optimizer step on n ranks with P values: the optimizer over about P / n values
// (its state sized to them), one allreduce of one value for the inf/NaN check, and
// GradientSync::gather_parameters (allgathers of P values).

#include <stdexcept>
#include <string>
#include <unordered_set>

#include "mpitrain/engine/engine.hpp"

namespace mpitrain {

void Engine::shard_optimizer() {
  shard_optimizer_.reset();
  shard_params_.clear();
  shard_begin_.clear();
  if (!sync_ || !sync_->sharded() || optimizer_ == nullptr) return;
  const std::unordered_set<const nn::Parameter*> stepped(optimizer_->parameters().begin(),
                                                         optimizer_->parameters().end());
  std::vector<nn::Parameter*> pieces;
  for (const ShardPiece& piece : sync_->shard_pieces()) {
    nn::Parameter& p = *params_[piece.param];
    if (stepped.count(&p) == 0) continue;
    auto view = std::make_unique<nn::Parameter>();
    view->name = p.name;  // one piece per parameter: names stay unique
    view->value = Tensor::view(p.value.span().subspan(piece.begin, piece.grad.size()),
                               Shape{piece.grad.size()});
    view->grad = Tensor::view(piece.grad, Shape{piece.grad.size()});
    pieces.push_back(view.get());
    shard_begin_.push_back(piece.begin);
    shard_params_.push_back(std::move(view));
  }
  shard_optimizer_ = optimizer_->fresh_copy(std::move(pieces));
  if (!shard_optimizer_) {
    shard_params_.clear();
    shard_begin_.clear();
    throw std::invalid_argument("Engine (rank " + std::to_string(comm_.rank()) +
                                "): distributed.zero_stage = 1 needs an optimizer that can step "
                                "pieces of parameters (nn::AdamW, nn::Sgd), not '" +
                                optimizer_->kind() + "'");
  }
}

void Engine::optimizer_step() {
  if (optimizer_ == nullptr && sync_ && sync_->sharded()) {
    // Each rank holds only its shard of the averaged gradients, and nothing would gather
    // updated parameters: the ranks would drift apart silently.
    throw std::logic_error("Engine::step (rank " + std::to_string(comm_.rank()) +
                           "): distributed.zero_stage = 1 needs an optimizer (prepare's, or "
                           "Engine::set_optimizer) to step the shards and gather the parameters");
  }
  if (optimizer_ == nullptr) return;
  if (!shard_optimizer_) {
    optimizer_->step();
    return;
  }
  // The scheduler (or the user) sets the learning rate on the optimizer given to prepare().
  shard_optimizer_->set_lr(optimizer_->lr());
  shard_optimizer_->step();
  idle_stream();
  sync_->gather_parameters();
}

bool Engine::finite_on_every_rank(bool finite) const {
  if (!sync_ || !sync_->sharded()) return finite;
  idle_stream();
  const Communicator::CallSite site(comm_, "Engine::step");
  return comm_.allreduce_value(finite ? 0.0f : 1.0f, ReduceOp::max) == 0.0f;
}

MemoryReport Engine::memory_report() const {
  MemoryReport m;
  if (!sync_) return m;
  for (const nn::Parameter* p : params_) m.parameter_bytes += p->value.numel() * sizeof(float);
  const SyncMemory sync = sync_->memory();
  m.gradient_bytes = sync.gradient_bytes;
  m.comm_bytes = sync.comm_bytes;
  if (optimizer_ == nullptr) return m;
  const nn::Optimizer& stepping = shard_optimizer_ ? *shard_optimizer_ : *optimizer_;
  m.optimizer_state_bytes = stepping.state_values() * sizeof(float);
  return m;
}

}  // namespace mpitrain
