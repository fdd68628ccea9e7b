// Helper executable for checkpoint_crash_test: a world-size-1 job that saves checkpoints in
// a loop until it is killed.
//
//   checkpoint_save_forever PROJECT_DIR MIB [explicit]
//
// Checkpoint k holds a model tensor of MIB MiB whose element i is k + i / 8 (mod 2^20, so
// values stay exact in fp32); after each commit it prints "committed <k>" on stdout. With
// "explicit", checkpoint k is saved to the explicit folder checkpoints/step_<k> (as the
// trainer does without automatic naming) instead of checkpoints/checkpoint_<k>.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

int main(int argc, char** argv) {
  const bool explicit_folders = argc == 4 && std::string(argv[3]) == "explicit";
  if (argc != 3 && !explicit_folders) {
    std::fprintf(stderr, "usage: %s PROJECT_DIR MIB [explicit]\n", argv[0]);
    return 2;
  }
  try {
    mpitrain::MpiRuntime runtime(&argc, &argv);
    const mpitrain::Communicator comm(runtime);
    mpitrain::checkpoint::ProjectConfiguration config;
    config.project_dir = argv[1];
    config.total_limit = 2;
    config.automatic_checkpoint_naming = !explicit_folders;
    mpitrain::checkpoint::CheckpointManager manager(config, comm);
    const std::size_t count = std::stoul(argv[2]) * (std::size_t{1} << 20) / sizeof(float);
    for (std::int64_t k = manager.next_iteration();; ++k) {
      mpitrain::checkpoint::CheckpointState state;
      mpitrain::nn::Tensor weights({count});
      for (std::size_t i = 0; i < count; ++i) {
        weights[i] = static_cast<float>(k) + static_cast<float>(i % (1u << 20)) / 8.0f;
      }
      state.replicated["model"].tensors["0.weight"] = std::move(weights);
      state.replicated["engine"].integers["step"] = k;
      state.step = k;
      if (explicit_folders) {
        manager.save(state, comm, manager.checkpoints_dir() / ("step_" + std::to_string(k)));
      } else {
        manager.save(state, comm);
      }
      std::printf("committed %lld\n", static_cast<long long>(k));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save_forever: %s\n", e.what());
    return 1;
  }
}
