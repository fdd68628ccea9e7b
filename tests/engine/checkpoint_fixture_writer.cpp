// checkpoint_fixture_writer: writes the committed compatibility checkpoint and the values
// it holds (tests/engine/data/README.md says with which commit and command).
//
//   mpiexec -n 2 checkpoint_fixture_writer OUT_DIR
//
// Trains FixtureRun for 7 optimizer steps (mid-epoch: the loader stands at batch 2 of epoch
// 1), saves the checkpoint to OUT_DIR/checkpoint_v1 and writes OUT_DIR/checkpoint_v1.expected:
// one line per value group, "key v0 v1 ...", each value a double in hexadecimal floating
// point so that the test compares bits. Keys: the engine counters, the loader's epoch and
// position, every parameter, every optimizer and scheduler state entry, the scaler state,
// the counter, and each rank's random streams (rng.rank<r>.<path>.<key>: their state dicts, the
// 64-bit seed, stream and position as 32-bit halves).

#include <cstdio>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_fixture_run.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"

namespace {

using namespace mpitrain;

// Returns "key v0 v1 ...\n" with each value in hexadecimal floating point.
std::string line(const std::string& key, const std::vector<double>& values) {
  std::string out = key;
  for (double v : values) out += fmt::format(" {:a}", v);
  return out + "\n";
}

std::vector<double> of(std::span<const float> values) { return {values.begin(), values.end()}; }

// Returns the replicated values of `run`, as the checkpoint should restore them.
std::string replicated_lines(const testing::FixtureRun& run) {
  const EngineState& st = run.engine->state();
  std::string out = line("world_size", {static_cast<double>(run.engine->world_size())});
  out += line("engine.step", {static_cast<double>(st.step)});
  out += line("engine.micro_step", {static_cast<double>(st.micro_step)});
  out += line("engine.epoch", {static_cast<double>(st.epoch)});
  out += line("engine.batches_in_epoch", {static_cast<double>(st.batches_in_epoch)});
  out += line("engine.samples_seen", {static_cast<double>(st.samples_seen)});
  out += line("engine.skipped_steps", {static_cast<double>(st.skipped_steps)});
  out += line("loader.epoch", {static_cast<double>(run.loader->epoch())});
  out += line("loader.position", {static_cast<double>(run.loader->position())});
  for (const nn::Parameter* p : run.engine->parameters()) out += line("model." + p->name, of(p->value.span()));
  const StateDict o = run.optimizer.state_dict();
  for (const auto& [k, t] : o.tensors) out += line("optimizer.tensor." + k, of(t.span()));
  for (const auto& [k, v] : o.scalars) out += line("optimizer.scalar." + k, {v});
  for (const auto& [k, v] : run.scheduler.state_dict().scalars) out += line("scheduler." + k, {v});
  const LossScaler::State s = run.engine->loss_scaler()->state();
  out += line("scaler", {s.scale, static_cast<double>(s.growth_tracker),
                         static_cast<double>(s.hysteresis), static_cast<double>(s.skipped_steps)});
  out += line("optimizer.lr", {run.optimizer.lr()});
  out += line("counter", {static_cast<double>(run.counter.value)});
  return out;
}

// Returns this rank's random-stream lines.
std::string rank_lines(testing::FixtureRun& run, int rank) {
  std::string out;
  for (const auto& [path, stream] : run.model.random_streams()) {
    for (const auto& [key, value] : stream->state_dict().scalars) {
      out += line("rng.rank" + std::to_string(rank) + "." + path + "." + key, {value});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    MpiRuntime runtime(&argc, &argv);
    Communicator comm(runtime);
    if (argc != 2) throw std::invalid_argument("usage: checkpoint_fixture_writer OUT_DIR");
    const std::filesystem::path out = argv[1];
    testing::FixtureRun run(comm, out / "project");
    run.train(7);
    run.engine->save_state(out / "checkpoint_v1");
    std::string text = comm.rank() == 0 ? replicated_lines(run) : std::string();
    for (const std::string& s : comm.allgather_strings(rank_lines(run, comm.rank()))) text += s;
    if (comm.rank() == 0) {
      std::FILE* f = std::fopen((out / "checkpoint_v1.expected").c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write " + out.string());
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_fixture_writer: %s\n", e.what());
    return 1;
  }
}
