#pragma once
// What the two C++ programs of the libtorch benchmark share: their options and the timed
// loop, so both measure the same way as ddp_gloo.py does (warm-up steps, a barrier, the timed
// steps, a barrier; samples/s counts every rank's examples) and print the same JSON line.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "mpitrain/collectives/communicator.hpp"

namespace bench {

struct Options {
  std::size_t batch = 64;    // examples per rank and step
  std::size_t warmup = 20;   // untimed steps first
  std::size_t steps = 200;   // timed steps
  std::string model = "cnn";  // cnn.hpp's size: cnn or wide
};

// Adds the options every program of the benchmark takes to `app`.
inline void add_options(CLI::App& app, Options& options) {
  app.add_option("--batch", options.batch, "examples per rank and step");
  app.add_option("--warmup", options.warmup, "untimed steps");
  app.add_option("--steps", options.steps, "timed steps");
  app.add_option("--model", options.model, "the CNN's size (cnn.hpp)")->check(CLI::IsMember({"cnn", "wide"}));
}

// Runs `train_step(step)` (which returns the step's local loss) for the warm-up and the timed
// steps, then has rank 0 print {"impl", "samples_per_s", "step_ms", "steps", "batch", "world",
// "model", "loss"}: the timed steps from a barrier before the first to one after the last.
inline void run_timed(const mpitrain::Communicator& comm, const std::string& impl,
                      const Options& options, const std::function<double(std::size_t)>& train_step) {
  for (std::size_t step = 0; step < options.warmup; ++step) train_step(step);
  comm.barrier();
  const auto begin = std::chrono::steady_clock::now();
  double loss = 0.0;
  for (std::size_t step = options.warmup; step < options.warmup + options.steps; ++step) {
    loss = train_step(step);
  }
  comm.barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  if (comm.rank() != 0) return;
  const double samples = static_cast<double>(options.steps * options.batch) * comm.size();
  std::printf("%s\n", fmt::format(R"({{"impl": "{}", "samples_per_s": {:.2f}, "step_ms": {:.3f}, )"
                                  R"("steps": {}, "batch": {}, "world": {}, "model": "{}", "loss": {:.6f}}})",
                                  impl, samples / seconds, 1e3 * seconds / static_cast<double>(options.steps),
                                  options.steps, options.batch, comm.size(), options.model, loss)
                          .c_str());
  std::fflush(stdout);
}

}  // namespace bench
