// Algorithm: the defaults every algorithm inherits.

#include "mpitrain/collectives/detail/algorithm.hpp"

#include <stdexcept>

#include "mpitrain/collectives/detail/reduce_kernels.hpp"

namespace mpitrain::detail {

std::string Algorithm::why_not(const CollectiveArgs&, const CommContext&) const { return {}; }

std::string Algorithm::why_not_nonblocking(const CollectiveArgs&) const {
  return "it has no nonblocking form";
}

Request Algorithm::post(const CommContext& ctx, const CollectiveArgs& args) const {
  throw std::invalid_argument(std::string(to_string(args.op)) + " on rank " +
                              std::to_string(ctx.rank) + ": algorithm '" + std::string(name()) +
                              "' has no nonblocking form");
}

void Algorithm::run_wire_by_conversion(const CommContext& ctx, const CollectiveArgs& args) const {
  auto* data = static_cast<float*>(args.recv);
  narrow_from_f32(data, args.wire_scratch, args.count, *args.wire, 1);
  CollectiveArgs half = args;
  half.type = *args.wire;
  half.wire.reset();
  half.send = args.wire_scratch;
  half.recv = args.wire_scratch;
  run(ctx, half);
  widen_to_f32(args.wire_scratch, data, args.count, *args.wire);
}

}  // namespace mpitrain::detail
