#pragma once
// The memory a training run will allocate, computed from the config and the data sets'
// shapes before anything large is allocated, and checked against the memory available on
// the node, so that an absurd size (model.hidden: [100000000], a huge data.batch_size) is a
// config error naming the key and the bytes rather than a bare std::bad_alloc.
//
// Estimate, per rank, in bytes (fp32 = 4 bytes):
//   model  = P * 4 * copies, P = the MLP's parameters (sum over layers of in * out + out),
//            copies = weights + gradients + the engine's gradient buckets + the optimizer's
//            state (adamw 2 moments, sgd with momentum 1);
//   batch  = B * (F + 1 + 3 * (H + C)) * 4, B = the batch per rank, F = features,
//            H = the sum of the hidden widths, C = classes: the input batch and labels, and
//            each layer's output, activation and gradient.
// The node holds local_size ranks; their sum must not exceed MemAvailable of /proc/meminfo
// (sysconf(_SC_AVPHYS_PAGES) pages when that cannot be read). The estimate leaves out
// buffers that do not grow with these keys (the data sets themselves are already loaded).

#include <cstdint>
#include <string>

#include "train_config.hpp"

namespace mpitrain::app {

struct MemoryNeed {
  std::uint64_t model_bytes = 0;  // per rank; saturates at UINT64_MAX
  std::uint64_t batch_bytes = 0;  // per rank; saturates at UINT64_MAX
  std::uint64_t parameters = 0;
};

// Returns the estimate above for `features` inputs and `classes` outputs at `ranks` ranks.
MemoryNeed memory_need(const TrainConfig& config, std::size_t features, std::size_t classes, int ranks);

// Returns the bytes of memory available to new allocations on this node.
std::uint64_t available_memory_bytes();

// Throws ConfigError naming model.hidden (or data.batch_size, whichever part is larger),
// the bytes needed and the bytes available when `ranks_on_node` ranks of `need` exceed
// `available` bytes.
void check_memory(const TrainConfig& config, const MemoryNeed& need, int ranks_on_node, std::uint64_t available);

}  // namespace mpitrain::app
