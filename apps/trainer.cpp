// trainer: the mpitrain command line (DESIGN.md section 6).
//
//   mpirun -np N trainer --config run.yaml [--set key.path=value ...]
//   trainer [--config run.yaml] [--set ...] print-config
//                                   the effective config, each key with where it came from
//   trainer --version               the mpitrain version
//   trainer env                     versions, ranks, nodes, threads
//   trainer check                   collectives checked in closed form, bandwidth table
//   trainer checkpoints list|verify DIR
//   trainer eval --config run.yaml --checkpoint PATH|latest       evaluation only, any world size
//   trainer export --checkpoint PATH|latest --format h5|safetensors --output FILE
//   trainer generate --checkpoint PATH|latest --prompt TEXT --tokens N [--temperature T --seed S]
//
// With no arguments at all the trainer prints its usage and exits 2 (it used to train the
// defaults into ./runs/default). Messages go through one Log (log.hpp): a rank prefix and
// MPITRAIN_LOG_LEVEL.
//
// Exit codes: 0 done (also after a SIGTERM/SIGUSR1 stop, once the checkpoint is saved);
// 2 bad usage or config (rank 0 prints the message, naming the key and file:line, and every
// rank exits 2); 1 runtime error. A runtime error raised on some ranks only ends the whole
// job through MPI_Abort after the failing rank printed its message, so no rank waits forever
// in a collective; so does the watchdog when a phase makes no progress for
// distributed.timeout_s seconds.

#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "agreed_error.hpp"
#include "checkpoints_command.hpp"
#include "env_report.hpp"
#include "eval_command.hpp"
#include "export_command.hpp"
#include "generate_command.hpp"
#include "log.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/state_file.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_error.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "run_start.hpp"
#include "self_check.hpp"
#include "stop_signal.hpp"
#include "train_config.hpp"
#include "training_run.hpp"
#include "watchdog.hpp"

namespace {

// SIGTERM and SIGUSR1 are blocked before any shared library's initialiser runs, not only in
// main (StopSignal): OpenBLAS starts its worker threads while it loads, before main, when it
// sees more than one core (a rank that mpirun does not bind to a core: oversubscribed, or
// --bind-to none), and such a thread, not blocking them, took the signal with the default
// action: SIGUSR1 to mpirun at 3 or 4 ranks on 2 cores ended ranks with "exited on signal
// 10" instead of a checkpoint. The executable's .preinit_array runs before the libraries'
// constructors (System V ABI), so every thread inherits the mask and StopSignal's watcher
// takes the signals with sigtimedwait as designed.
void block_stop_signals_before_libraries(int, char**, char**) {
  const sigset_t set = mpitrain::app::stop_signals();
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) {
    std::fprintf(stderr, "trainer: pthread_sigmask(SIG_BLOCK) failed (error %d): SIGTERM/SIGUSR1 "
                         "may end a rank without a checkpoint\n", rc);
  }
}
[[gnu::used, gnu::section(".preinit_array")]] constexpr void (*kBlockStopSignalsEarly)(int, char**, char**) =
    &block_stop_signals_before_libraries;

using namespace mpitrain;

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoints_dir;
  std::string fault;  // --inject-fault KIND@RANK:STEP
  std::string checkpoint, format, output;  // eval and export
  app::GenerateOptions generate;
};

// Prints the message of a failure that every rank saw the same way (rank 0 only), or of
// one that may be this rank's alone (every failing rank, with its rank).
void report(app::Log& log, const Communicator& comm, const char* what, const std::string& message, bool shared) {
  if (shared && comm.rank() != 0) return;
  if (shared) {
    log.error("trainer: {}: {}", what, message);
  } else {
    log.error("trainer: {} on rank {} of {}: {}", what, comm.rank(), comm.size(), message);
  }
}

// Returns the exit code of `trainer checkpoints list|verify DIR`. Rank 0 alone reads the
// folder; whatever happens there, it reaches the broadcast, so the other ranks never wait
// for it, and every rank exits with its code.
int checkpoints_command(bool list, const std::string& dir, const Communicator& comm, app::Log& log) {
  int code = 0;
  if (comm.rank() == 0) {
    try {
      code = list ? app::list_checkpoints_command(dir, stdout, stderr)
                  : app::verify_checkpoints_command(dir, stdout, stderr);
    } catch (const std::exception& e) {
      std::fflush(stdout);
      log.error("trainer checkpoints {}: {}", list ? "list" : "verify", e.what());
      code = 1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
  }
  comm.broadcast(std::span<int>(&code, 1), 0);
  return code;
}

struct WeightsCommands {
  CLI::App* eval;
  CLI::App* export_weights;
  CLI::App* generate;
};

// Returns the subcommands `eval` and `export` (apps/eval_command.hpp, apps/export_command.hpp),
// added to `app` with their options.
WeightsCommands add_weights_commands(CLI::App& app, Options& options) {
  CLI::App* eval = app.add_subcommand("eval", "evaluate a checkpoint on the test set, without training");
  CLI::App* export_weights = app.add_subcommand("export", "write a checkpoint's weights as .h5 or .safetensors");
  CLI::App* generate = app.add_subcommand("generate", "continue a prompt with a language model's checkpoint");
  for (CLI::App* sub : {eval, export_weights, generate}) {
    sub->add_option("--checkpoint", options.checkpoint, "checkpoint folder, weights file, or latest")->required();
    sub->fallthrough();  // --config and --set may follow the subcommand
  }
  export_weights->add_option("--format", options.format, "h5 | safetensors")->required();
  export_weights->add_option("--output", options.output, "the file to write")->required();
  generate->add_option("--prompt", options.generate.prompt, "the text to continue")->required();
  generate->add_option("--tokens", options.generate.tokens, "bytes to generate")->required()->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", options.generate.temperature, "sampling temperature (0: greedy)");
  generate->add_option("--seed", options.generate.seed, "seed of the sampler");
  return {eval, export_weights, generate};
}

int train(const Options& options, Communicator& comm, const app::StopSignal& stop, app::Log& log) {
  const app::TrainConfig config = app::load_config(options.config, options.overrides);
  if (config.distributed.algorithm_table) {
    try {
      comm.use_algorithm_table(*config.distributed.algorithm_table);
    } catch (const MpiError&) {
      throw;  // MPI failed under the agreement: not a problem of the table
    } catch (const std::runtime_error& e) {
      // Every rank throws (the ranks agree on the table): a config error, printed once.
      throw app::ConfigError(config.origin("distributed.algorithm_table") +
                             ": distributed.algorithm_table: " + e.what());
    }
  }
  // Every wait for peers in a collective gives up after timeout_s, naming the ranks that did
  // not arrive (collective_timeout.hpp); the watchdog covers the rest and defers to it.
  comm.set_timeout(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(config.distributed.timeout_s)));
  const app::InjectedFault fault = app::parse_injected_fault(options.fault);
  // Rank 0's checks and lock on project.dir (run_start.hpp), held until the run returns.
  const app::RunStart started = app::start_run(config, comm);
  app::Watchdog watchdog(
      config.distributed.timeout_s, comm.rank(),
      [&comm, &log](const std::string& text) {
        log.alert(fmt::format("trainer: {}; aborting the job", text));  // the watchdog's thread
        comm.abort(1);
      },
      [&comm] { return comm.waiting_for_peers(); });
  const app::TrainingOutcome outcome = app::run_training(config, comm, stop, watchdog, log, fault);
  (void)outcome;
  return 0;
}

// Returns this rank's Log at the level MPITRAIN_LOG_LEVEL names, or nothing (rank 0 said why)
// when it names none.
std::optional<app::Log> make_log(const Communicator& comm) {
  try {
    return app::Log(comm.rank(), app::parse_log_level(std::getenv("MPITRAIN_LOG_LEVEL")), stdout, stderr);
  } catch (const std::invalid_argument& e) {
    app::Log errors(comm.rank(), app::LogLevel::error, stdout, stderr);
    report(errors, comm, "config error", e.what(), true);
    return std::nullopt;
  }
}

struct Commands {
  CLI::App* print_config;
  CLI::App* env;
  CLI::App* check;
  CLI::App* checkpoints;
  CLI::App* checkpoints_list;
  WeightsCommands weights;
};

// Returns the trainer's subcommands, added to `app` with their options (none chosen: train).
Commands add_commands(CLI::App& app, Options& options) {
  Commands c{};
  c.print_config =
      app.add_subcommand("print-config", "print the effective config (after --config and --set), with sources");
  c.env = app.add_subcommand("env", "versions of mpitrain, MPI, HDF5, BLAS, compiler; ranks, nodes");
  c.check = app.add_subcommand("check", "check the collectives of this launch and measure bandwidth");
  c.checkpoints = app.add_subcommand("checkpoints", "list or verify the checkpoints of a folder");
  c.checkpoints_list = c.checkpoints->add_subcommand("list", "committed checkpoints, oldest first");
  CLI::App* verify = c.checkpoints->add_subcommand("verify", "check files against their manifest");
  for (CLI::App* sub : {c.checkpoints_list, verify}) {
    sub->add_option("DIR", options.checkpoints_dir, "project, checkpoints/ or checkpoint folder")->required();
  }
  c.checkpoints->require_subcommand(1);
  c.weights = add_weights_commands(app, options);
  app.require_subcommand(0, 1);
  return c;
}

// Returns the exit code of the chosen subcommand (training when none was chosen).
int run_command(const Commands& c, const Options& options, const MpiRuntime& runtime, Communicator& comm,
                const app::StopSignal& stop, app::Log& log) {
  if (*c.print_config) {
    const std::string text = app::effective_config_yaml(options.config, options.overrides);
    if (comm.rank() == 0) std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (*c.env) {
    app::print_env(runtime, comm, stdout);
    return 0;
  }
  if (*c.check) return app::run_self_check(comm, stdout) == 0 ? 0 : 1;
  if (*c.checkpoints) return checkpoints_command(c.checkpoints_list->parsed(), options.checkpoints_dir, comm, log);
  if (*c.weights.eval) {
    app::eval_command(app::load_config(options.config, options.overrides), options.checkpoint, comm, log);
    return 0;
  }
  if (*c.weights.export_weights) {
    return app::export_command_on_rank0(app::load_config(options.config, options.overrides), options.checkpoint,
                                        options.format, options.output, comm, log);
  }
  if (*c.weights.generate) {
    return app::generate_command_on_rank0(app::load_config(options.config, options.overrides), options.checkpoint,
                                          options.generate, comm, log);
  }
  return train(options, comm, stop, log);
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
  std::optional<app::Log> log = make_log(*comm);
  if (!log) return 2;

  Options options;
  CLI::App app("mpitrain trainer: data-parallel training of an MLP on MPI.\n"
               "  mpirun -np N trainer --config run.yaml [--set key.path=value ...]",
               "trainer");
  app.set_version_flag("--version", "mpitrain " + checkpoint::mpitrain_version(), "print the mpitrain version");
  app.add_option("--config", options.config, "YAML config file (default: the built-in defaults)");
  app.add_option("--set", options.overrides, "override one key: key.path=value (a YAML scalar or list)")
      ->take_all();
  // Tests of the failure paths (tests/apps); an empty group keeps it out of --help.
  app.add_option("--inject-fault", options.fault, "throw@RANK:STEP or hang@RANK:STEP")->group("");
  const Commands commands = add_commands(app, options);
  if (argc <= 1) {
    // Training the defaults into ./runs/default by accident is worse than a usage message.
    if (main_rank) std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments; rank 0 speaks for all.
    std::ostringstream discard;
    const int code = main_rank ? app.exit(e) : app.exit(e, discard, discard);
    return code == 0 ? 0 : 2;
  }

  try {
    return run_command(commands, options, *runtime, *comm, stop, *log);
  } catch (const app::ConfigError& e) {
    report(*log, *comm, "config error", e.what(), true);
    return 2;
  } catch (const app::AgreedError& e) {
    report(*log, *comm, "error", e.what(), true);
    return 1;
  } catch (const checkpoint::CheckpointError& e) {
    // The checkpoint layer agrees on every outcome: every rank holds this same error.
    report(*log, *comm, "checkpoint error", e.what(), true);
    return 1;
  } catch (const std::exception& e) {
    report(*log, *comm, "error", e.what(), false);
    if (comm->size() > 1) comm->abort(1);
    return 1;
  }
}
