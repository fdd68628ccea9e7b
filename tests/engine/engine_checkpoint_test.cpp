// Engine checkpoints in one process: save_state/load_state round trip of every component,
// automatic numbering after a load, all-or-nothing loading (mismatched names, shapes,
// components, registered objects, and a failure on one rank leave every rank's running state
// exactly as it was), saving only at step boundaries, and save_model. Exact resume across
// fresh processes and N -> M ranks are resume_test.cmake's.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/checkpoint_error.hpp"
#include "mpitrain/checkpoint/state_group.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;
using checkpoint::testing::flip_byte;
using checkpoint::testing::SharedTempDir;

constexpr std::size_t kFeatures = 6;
constexpr std::size_t kClasses = 3;

// A registered object: one integer. Its next `failures` loads on rank `fail_on_rank` throw,
// after changing the value when `change_before_failing` (a load() that ignores the advice
// to read everything first).
class Counter final : public checkpoint::Checkpointable {
 public:
  void save(checkpoint::H5Group& group) const override {
    checkpoint::StateGroup g;
    g.integers["value"] = value;
    checkpoint::write_state_group(group, g);
  }
  void load(const checkpoint::H5Group& group) override {
    const std::int64_t v = checkpoint::read_state_group(group).integers.at("value");
    if (fail_on_rank == rank && failures > 0) {
      --failures;
      if (change_before_failing) value = v;
      throw std::runtime_error("Counter refuses to load here");
    }
    value = v;
  }
  std::int64_t value = 0;
  int rank = 0;
  int fail_on_rank = -1;
  int failures = 0;
  bool change_before_failing = false;
};

// One training setup: model (hidden widths as given), optimizer, scheduler, loader, engine.
struct TrainingRun {
  TrainingRun(const Communicator& comm, const fs::path& project, std::vector<std::size_t> hidden,
      bool adamw = true, Precision precision = Precision::fp32)
      : model(nn::make_mlp(kFeatures, hidden, kClasses, nn::Activation::relu, 0.2f, 11)) {
    if (adamw) {
      optimizer = std::make_unique<nn::AdamW>(model.parameters(), nn::AdamWOptions{.lr = 1e-2});
    } else {
      optimizer = std::make_unique<nn::Sgd>(model.parameters(), nn::SgdOptions{.lr = 0.1, .momentum = 0.9});
    }
    scheduler = std::make_unique<nn::LrScheduler>(*optimizer, nn::LrScheduleKind::cosine, 2, 20);
    EngineConfig config;
    config.seed = 11;
    config.mixed_precision = precision;
    config.project.project_dir = project;
    engine = std::make_unique<Engine>(config, comm);
    data::SyntheticOptions d;
    d.size = 101;
    d.feature_dim = kFeatures;
    d.num_classes = kClasses;
    loader = std::make_unique<data::DataLoader>(
        engine->make_loader(std::make_shared<data::SyntheticDataset>(d), {.batch_size = 4, .seed = 2}));
    engine->prepare(model, *optimizer, *loader, scheduler.get());
    counter.rank = comm.rank();
    engine->register_for_checkpointing("counter", counter);
  }
  // Members are destroyed in reverse order: the engine first, before what it refers to.

  // Runs `steps` optimizer steps.
  void train(int steps) {
    data::Batch batch;
    Tensor grad;
    for (int s = 0; s < steps;) {
      if (!engine->next_batch(batch)) continue;
      nn::cross_entropy(model.forward(batch.features), batch.labels, grad);
      engine->backward(grad);
      engine->step();
      engine->zero_grad();
      ++counter.value;
      ++s;
    }
  }

  // Returns everything a resume depends on, as bytes: parameters, optimizer and scheduler
  // state, engine counters, loader position, random streams, the registered counter.
  std::vector<double> fingerprint() const {
    std::vector<double> out;
    for (const nn::Parameter* p : engine->parameters()) out.insert(out.end(), p->value.data(), p->value.data() + p->value.numel());
    const StateDict o = optimizer->state_dict();
    for (const auto& [k, t] : o.tensors) out.insert(out.end(), t.data(), t.data() + t.numel());
    for (const auto& [k, v] : o.scalars) out.push_back(v);
    for (const auto& [k, v] : scheduler->state_dict().scalars) out.push_back(v);
    const EngineState& st = engine->state();
    for (std::uint64_t v : {st.step, st.micro_step, st.epoch, st.batches_in_epoch, st.samples_seen}) {
      out.push_back(static_cast<double>(v));
    }
    out.push_back(static_cast<double>(loader->position()));
    out.push_back(static_cast<double>(loader->epoch()));
    for (const auto& [path, stream] : const_cast<nn::Sequential&>(model).random_streams()) {
      out.push_back(static_cast<double>(stream->position()));
      out.push_back(static_cast<double>(stream->stream()));
    }
    out.push_back(static_cast<double>(counter.value));
    return out;
  }

  nn::Sequential model;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<nn::LrScheduler> scheduler;
  Counter counter;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<Engine> engine;
};

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Returns the message of the exception `f` throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class EngineCheckpointTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

TEST_F(EngineCheckpointTest, LoadRestoresEveryComponentAndNumberingContinues) {
  SharedTempDir dir(comm_, "engine_roundtrip");
  TrainingRun run(comm_, dir.path(), {8, 8});
  run.train(7);  // mid-epoch: 101 examples in batches of 4 per rank
  const std::vector<double> saved = run.fingerprint();
  EXPECT_EQ(run.engine->save_state().number, 0);
  run.train(5);
  EXPECT_EQ(run.engine->save_state().number, 1);
  ASSERT_FALSE(same_bits(run.fingerprint(), saved));

  // An older checkpoint loads; the warning says the next save (checkpoint_1) would fail.
  const Engine::LoadReport report = run.engine->load_state(dir.path() / "checkpoints" / "checkpoint_0");
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("newer checkpoints exist (checkpoint_1): the next automatic "
                                    "save, checkpoint_1, will fail; remove them before saving"),
            std::string::npos)
      << report.warnings[0];
  EXPECT_TRUE(same_bits(run.fingerprint(), saved));

  // A new job: load_state() takes the newest (no warning), and the next save follows it.
  TrainingRun fresh(comm_, dir.path(), {8, 8});
  const Engine::LoadReport latest = fresh.engine->load_state();
  EXPECT_EQ(latest.dir.filename(), "checkpoint_1");
  EXPECT_TRUE(latest.warnings.empty());
  EXPECT_EQ(fresh.engine->checkpoints().next_iteration(), 2);
  fresh.train(3);
  run.engine->load_state(dir.path() / "checkpoints" / "checkpoint_1");
  run.train(3);
  EXPECT_TRUE(same_bits(run.fingerprint(), fresh.fingerprint()));
  EXPECT_EQ(fresh.engine->save_state().number, 2);
}

// load_state() passes over newer checkpoints that fail verification (a damaged disk): it
// loads the newest sound one, names the others, keeps them, and numbers the next save past
// them, so no warning says that save will fail. When every checkpoint is damaged it throws
// naming the newest one's damage.
TEST_F(EngineCheckpointTest, LoadStateSkipsNewerCheckpointsThatFailVerification) {
  SharedTempDir dir(comm_, "engine_skip_damaged");
  TrainingRun run(comm_, dir.path(), {8});
  run.train(2);
  run.engine->save_state();
  run.train(2);
  run.engine->save_state();
  const std::vector<double> at_checkpoint_1 = run.fingerprint();
  run.train(2);
  run.engine->save_state();
  const fs::path checkpoints = dir.path() / "checkpoints";
  checkpoint::testing::on_rank0(comm_, [&] { flip_byte(checkpoints / "checkpoint_2" / "state.h5", 100); });

  TrainingRun fresh(comm_, dir.path(), {8});
  const Engine::LoadReport report = fresh.engine->load_state();
  EXPECT_EQ(report.dir.filename(), "checkpoint_1");
  EXPECT_TRUE(same_bits(fresh.fingerprint(), at_checkpoint_1));
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("newer checkpoints were skipped and are kept: checkpoint_2 fails "
                                    "verification ("),
            std::string::npos)
      << report.warnings[0];
  EXPECT_NE(report.warnings[0].find("state.h5"), std::string::npos) << report.warnings[0];
  EXPECT_NE(report.warnings[0].find("the next automatic save is checkpoint_3"), std::string::npos)
      << report.warnings[0];
  EXPECT_EQ(fresh.engine->checkpoints().next_iteration(), 3);
  EXPECT_TRUE(fs::exists(checkpoints / "checkpoint_2"));
  fresh.train(1);
  EXPECT_EQ(fresh.engine->save_state().number, 3);

  checkpoint::testing::on_rank0(comm_, [&] {
    for (const char* name : {"checkpoint_0", "checkpoint_1", "checkpoint_3"}) {
      flip_byte(checkpoints / name / "state.h5", 100);
    }
  });
  const std::string msg = error_of([&] { fresh.engine->load_state(); });
  EXPECT_NE(msg.find("checkpoint_3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("state.h5"), std::string::npos) << msg;
}

TEST_F(EngineCheckpointTest, MismatchesNameTheKeyAndLeaveTheRunningStateUntouched) {
  SharedTempDir dir(comm_, "engine_mismatch");
  {
    TrainingRun saver(comm_, dir.path(), {8, 8});
    saver.train(3);
    saver.engine->save_state();
  }
  const fs::path ckpt = dir.path() / "checkpoints" / "checkpoint_0";
  struct Case {
    std::vector<std::size_t> hidden;
    bool adamw;
    Precision precision;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {{8, 9}, true, Precision::fp32, {"/model", "3.weight", "[9, 8]", "[8, 8]"}},
      {{8, 8, 8}, true, Precision::fp32, {"/model", "9.weight"}},   // a key the checkpoint lacks
      {{8}, true, Precision::fp32, {"/model", "6.weight"}},         // keys the run lacks
      {{8, 8}, false, Precision::fp32, {"/optimizer", "'adamw'", "'sgd'"}},
      {{8, 8}, true, Precision::fp16, {"/scaler", "mixed_precision fp16"}},
  };
  for (const Case& c : cases) {
    TrainingRun run(comm_, dir.path(), c.hidden, c.adamw, c.precision);
    run.train(2);
    const std::vector<double> before = run.fingerprint();
    const std::string msg = error_of([&] { run.engine->load_state(ckpt); });
    for (const std::string& f : c.fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
    EXPECT_TRUE(same_bits(run.fingerprint(), before)) << msg;
  }
}

TEST_F(EngineCheckpointTest, AFailureOnOneRankRestoresEveryRankAndEveryRegisteredObject) {
  SharedTempDir dir(comm_, "engine_one_rank");
  const int last = comm_.size() - 1;
  // Restored after "counter" (name order), so "counter" has loaded on every rank when
  // "later" fails on the last one.
  Counter later;
  later.rank = comm_.rank();
  TrainingRun run(comm_, dir.path(), {8});
  run.engine->register_for_checkpointing("later", later);
  run.train(4);
  later.value = 40;
  run.engine->save_state();
  run.train(3);
  later.value = 70;
  const std::vector<double> before = run.fingerprint();
  ASSERT_EQ(run.counter.value, 7);

  later.fail_on_rank = last;
  later.failures = 1;
  later.change_before_failing = true;
  std::string msg = error_of([&] { run.engine->load_state(); });
  EXPECT_NE(msg.find("Counter refuses to load here"), std::string::npos) << msg;
  EXPECT_NE(msg.find("failed on rank(s) " + std::to_string(last) + ":"), std::string::npos) << msg;
  // All or nothing: parameters, optimizer, counters, loader and both registered objects are
  // back on every rank, also where the objects had loaded (counter 4, later 40) and where
  // "later" changed before it failed.
  EXPECT_TRUE(same_bits(run.fingerprint(), before));
  EXPECT_EQ(run.counter.value, 7);
  EXPECT_EQ(later.value, 70);

  // An object that also refuses to load its snapshot on the last rank: every rank's error
  // says so, naming that rank, and everything else is restored.
  later.failures = 2;
  later.change_before_failing = false;
  msg = error_of([&] { run.engine->load_state(); });
  EXPECT_NE(msg.find("; rank " + std::to_string(last) +
                     ": restoring registered object 'later' from its snapshot"),
            std::string::npos)
      << msg;
  EXPECT_EQ(later.failures, comm_.rank() == last ? 0 : 2);  // both loads ran there
  EXPECT_TRUE(same_bits(run.fingerprint(), before));
  EXPECT_EQ(later.value, 70);

  // The same checkpoint loads when nothing refuses.
  run.engine->load_state();
  EXPECT_EQ(run.counter.value, 4);
  EXPECT_EQ(later.value, 40);
}

TEST_F(EngineCheckpointTest, RegisteredObjectsMustMatch) {
  SharedTempDir dir(comm_, "engine_custom");
  TrainingRun run(comm_, dir.path(), {8});
  run.engine->save_state();
  Counter extra;
  run.engine->register_for_checkpointing("extra", extra);
  const std::string msg = error_of([&] { run.engine->load_state(); });
  EXPECT_NE(msg.find("/custom: counter"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(counter, extra)"), std::string::npos) << msg;
  EXPECT_THROW(run.engine->register_for_checkpointing("extra", extra), std::invalid_argument);
  EXPECT_THROW(run.engine->register_for_checkpointing("a/b", extra), std::invalid_argument);
}

TEST_F(EngineCheckpointTest, SavingInsideAnAccumulationWindowIsRefused) {
  SharedTempDir dir(comm_, "engine_window");
  TrainingRun run(comm_, dir.path(), {8});
  data::Batch batch;
  Tensor grad;
  ASSERT_TRUE(run.engine->next_batch(batch));
  nn::cross_entropy(run.model.forward(batch.features), batch.labels, grad);
  run.engine->backward(grad);  // synchronised, step() not yet called
  const std::string msg = error_of([&] { run.engine->save_state(); });
  EXPECT_NE(msg.find("save after step()"), std::string::npos) << msg;
  run.engine->step();
  run.engine->zero_grad();
  EXPECT_EQ(run.engine->save_state().number, 0);
  EXPECT_TRUE(fs::exists(dir.path() / "checkpoints" / "checkpoint_0" / "MANIFEST.json"));

  // Inside the accumulate() guard of the micro-step that stepped, as a loop body saves: the
  // open micro-step counts as done, so a resumed run's counters continue exactly.
  {
    ASSERT_TRUE(run.engine->next_batch(batch));
    auto micro = run.engine->accumulate();
    nn::cross_entropy(run.model.forward(batch.features), batch.labels, grad);
    run.engine->backward(grad);
    EXPECT_NE(error_of([&] { run.engine->save_state(); }).find("step() not called yet"), std::string::npos);
    run.engine->step();
    run.engine->zero_grad();
    EXPECT_EQ(run.engine->save_state().number, 1);
    EXPECT_NE(error_of([&] { run.engine->load_state(); }).find("inside an accumulate() micro-step"),
              std::string::npos);
  }
  const std::uint64_t micro_steps = run.engine->micro_step();
  run.engine->load_state();
  EXPECT_EQ(run.engine->micro_step(), micro_steps);
  EXPECT_EQ(run.engine->step_count(), 2u);
}

TEST_F(EngineCheckpointTest, SaveModelWritesTorchNamesFromTheMainProcess) {
  SharedTempDir dir(comm_, "engine_save_model");
  TrainingRun run(comm_, dir.path(), {8, 8});
  const fs::path h5 = run.engine->save_model(dir.path() / "model");
  const fs::path st = run.engine->save_model(dir.path() / "model", checkpoint::ModelFormat::safetensors);
  EXPECT_EQ(h5.filename(), "model.h5");
  EXPECT_EQ(st.filename(), "model.safetensors");
  EXPECT_TRUE(fs::exists(h5));
  const std::string header = checkpoint::testing::read_file(st).substr(8, 400);
  for (const char* name : {"0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"}) {
    EXPECT_NE(header.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace mpitrain
