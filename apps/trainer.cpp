// trainer: the mpitrain command line (DESIGN.md section 6).
//
//   mpirun -np N trainer --config run.yaml [--set key.path=value ...]
//   trainer print-config            the full default config, commented
//   trainer env                     versions, ranks, nodes, threads
//   trainer check                   collectives checked in closed form, bandwidth table
//   trainer checkpoints list|verify DIR
//
// Exit codes: 0 done (also after a SIGTERM/SIGUSR1 stop, once the checkpoint is saved);
// 2 bad usage or config (rank 0 prints the message, naming the key and file:line, and every
// rank exits 2); 1 runtime error. A runtime error raised on some ranks only ends the whole
// job through MPI_Abort after the failing rank printed its message, so no rank waits forever
// in a collective; so does the watchdog when a phase makes no progress for
// distributed.timeout_s seconds.

#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "checkpoints_command.hpp"
#include "env_report.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "self_check.hpp"
#include "stop_signal.hpp"
#include "train_config.hpp"
#include "training_run.hpp"
#include "watchdog.hpp"

namespace {

using namespace mpitrain;

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoints_dir;
  std::string fault;  // --inject-fault KIND@RANK:STEP
};

// Prints the message of a failure that every rank saw the same way (rank 0 only), or of
// one that may be this rank's alone (every failing rank, with its rank).
void report(const Communicator& comm, const char* what, const std::string& message, bool shared) {
  if (shared && comm.rank() != 0) return;
  if (shared) {
    std::fprintf(stderr, "trainer: %s: %s\n", what, message.c_str());
  } else {
    std::fprintf(stderr, "trainer: %s on rank %d of %d: %s\n", what, comm.rank(), comm.size(), message.c_str());
  }
  std::fflush(stderr);
}

// Returns the exit code of `trainer checkpoints list|verify DIR`. Rank 0 alone reads the
// folder; whatever happens there, it reaches the broadcast, so the other ranks never wait
// for it, and every rank exits with its code.
int checkpoints_command(bool list, const std::string& dir, const Communicator& comm) {
  int code = 0;
  if (comm.rank() == 0) {
    try {
      code = list ? app::list_checkpoints_command(dir, stdout, stderr)
                  : app::verify_checkpoints_command(dir, stdout, stderr);
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "trainer checkpoints %s: %s\n", list ? "list" : "verify", e.what());
      code = 1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
  }
  comm.broadcast(std::span<int>(&code, 1), 0);
  return code;
}

int train(const Options& options, Communicator& comm, const app::StopSignal& stop) {
  const app::TrainConfig config = app::load_config(options.config, options.overrides);
  if (config.distributed.algorithm_table) comm.use_algorithm_table(*config.distributed.algorithm_table);
  // Every wait for peers in a collective gives up after timeout_s, naming the ranks that did
  // not arrive (collective_timeout.hpp); the watchdog covers the rest and defers to it.
  comm.set_timeout(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(config.distributed.timeout_s)));
  const app::InjectedFault fault = app::parse_injected_fault(options.fault);
  app::Watchdog watchdog(
      config.distributed.timeout_s, comm.rank(),
      [&comm](const std::string& text) {
        std::fprintf(stderr, "trainer: %s; aborting the job\n", text.c_str());
        std::fflush(stderr);
        comm.abort(1);
      },
      [&comm] { return comm.waiting_for_peers(); });
  const app::TrainingOutcome outcome = app::run_training(config, comm, stop, watchdog, stdout, fault);
  (void)outcome;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before MPI starts threads: they must inherit the blocked SIGTERM/SIGUSR1.
  mpitrain::app::StopSignal stop;
  std::optional<MpiRuntime> runtime;
  std::optional<Communicator> comm;
  try {
    runtime.emplace(&argc, &argv);
    comm.emplace(*runtime);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: cannot start MPI: %s\n", e.what());
    return 1;
  }
  const bool main_rank = comm->rank() == 0;

  Options options;
  CLI::App app("mpitrain trainer: data-parallel training of an MLP on MPI.\n"
               "  mpirun -np N trainer --config run.yaml [--set key.path=value ...]");
  app.add_option("--config", options.config, "YAML config file (default: the built-in defaults)");
  app.add_option("--set", options.overrides, "override one key: key.path=value (a YAML scalar or list)")
      ->take_all();
  // Tests of the failure paths (tests/apps); an empty group keeps it out of --help.
  app.add_option("--inject-fault", options.fault, "throw@RANK:STEP or hang@RANK:STEP")->group("");
  CLI::App* print_config = app.add_subcommand("print-config", "print the full default config, commented");
  CLI::App* env = app.add_subcommand("env", "versions of mpitrain, MPI, HDF5, BLAS, compiler; ranks, nodes");
  CLI::App* check = app.add_subcommand("check", "check the collectives of this launch and measure bandwidth");
  CLI::App* checkpoints = app.add_subcommand("checkpoints", "list or verify the checkpoints of a folder");
  CLI::App* list = checkpoints->add_subcommand("list", "committed checkpoints, oldest first");
  CLI::App* verify = checkpoints->add_subcommand("verify", "check files against their manifest");
  for (CLI::App* sub : {list, verify}) {
    sub->add_option("DIR", options.checkpoints_dir, "project, checkpoints/ or checkpoint folder")->required();
  }
  checkpoints->require_subcommand(1);
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments; rank 0 speaks for all.
    std::ostringstream discard;
    const int code = main_rank ? app.exit(e) : app.exit(e, discard, discard);
    return code == 0 ? 0 : 2;
  }

  try {
    if (*print_config) {
      if (main_rank) std::fputs(app::default_config_yaml().c_str(), stdout);
      return 0;
    }
    if (*env) {
      app::print_env(*runtime, *comm, stdout);
      return 0;
    }
    if (*check) return app::run_self_check(*comm, stdout) == 0 ? 0 : 1;
    if (*checkpoints) return checkpoints_command(list->parsed(), options.checkpoints_dir, *comm);
    return train(options, *comm, stop);
  } catch (const app::ConfigError& e) {
    report(*comm, "config error", e.what(), true);
    return 2;
  } catch (const checkpoint::CheckpointError& e) {
    // The checkpoint layer agrees on every outcome: every rank holds this same error.
    report(*comm, "checkpoint error", e.what(), true);
    return 1;
  } catch (const std::exception& e) {
    report(*comm, "error", e.what(), false);
    if (comm->size() > 1) comm->abort(1);
    return 1;
  }
}
