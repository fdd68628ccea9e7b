// Helper executable for checkpoint_crash_test: a world-size-1 job that saves checkpoints in
// a loop until it is killed, or until it has made kMaxSaves of them (so that a helper its
// test lost track of cannot write forever).
//
//   checkpoint_save_forever PROJECT_DIR MIB [explicit]
//
// Checkpoint k holds a model tensor of MIB MiB whose element i is k + i / 8 (mod 2^20, so
// values stay exact in fp32); after each commit it prints "committed <k>" on stdout. With
// "explicit", checkpoint k is saved to the explicit folder checkpoints/step_<k> (as the
// trainer does without automatic naming) instead of checkpoints/checkpoint_<k>. Only the
// two newest checkpoints are kept, in both modes: total_limit = 2 with automatic naming,
// and with explicit folders the helper removes step_<k-2> itself once step_<k> is committed
// (total_limit does not apply to explicit folders), so the disk holds at most 3 x MIB MiB.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "mpitrain/checkpoint/checkpoint_manager.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace {
// Saves after which the helper exits (code 0) if nobody killed it; the crash test needs
// a few.
constexpr std::int64_t kMaxSaves = 200;
}  // namespace

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
    const std::int64_t first = manager.next_iteration();
    for (std::int64_t k = first; k < first + kMaxSaves; ++k) {
      mpitrain::checkpoint::CheckpointState state;
      mpitrain::Tensor weights({count});
      for (std::size_t i = 0; i < count; ++i) {
        weights[i] = static_cast<float>(k) + static_cast<float>(i % (1u << 20)) / 8.0f;
      }
      state.replicated["model"].tensors["0.weight"] = std::move(weights);
      state.replicated["engine"].integers["step"] = k;
      state.step = k;
      if (explicit_folders) {
        manager.save(state, comm, manager.checkpoints_dir() / ("step_" + std::to_string(k)));
        std::filesystem::remove_all(manager.checkpoints_dir() / ("step_" + std::to_string(k - 2)));
      } else {
        manager.save(state, comm);
      }
      std::printf("committed %lld\n", static_cast<long long>(k));
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save_forever: %s\n", e.what());
    return 1;
  }
}
