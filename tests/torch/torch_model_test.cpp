// TorchModel (torch/torch_model.hpp): libtorch models trained through the Engine, at 1 and
// 2 ranks. Equivalence metric: max |a - b| / max |b| over all parameters' values.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"
#include "torch_test_models.hpp"

namespace mpitrain::libtorch {
namespace {

using checkpoint::testing::SharedTempDir;
using namespace mpitrain::libtorch::testing;

class TorchModelTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }
  // A small-bucket configuration: several buckets for these small models.
  static EngineConfig config() {
    EngineConfig c;
    c.bucket_cap_mb = 1.0 / 1024;   // 1 KiB
    c.first_bucket_mb = 1.0 / 1024;
    return c;
  }
};

// ---- registration, views, hooks ---------------------------------------------------------------

TEST_F(TorchModelTest, RegistersTiedWeightsOnceAndRecordsTheAliases) {
  torch::manual_seed(0);
  TiedNet net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  TorchModel model(engine, net, opt);
  const std::vector<std::string> expected{"embed.weight", "hidden.weight", "hidden.bias"};
  EXPECT_EQ(model.parameter_names(), expected);
  ASSERT_EQ(model.aliases().size(), 1u);
  EXPECT_EQ(model.aliases().at("head.weight"), "embed.weight");
  ASSERT_EQ(engine.parameters().size(), 3u);
  EXPECT_EQ(engine.parameters()[0]->name, "embed.weight");
}

// Two distinct tensors over one storage (not a tie: each would get its own gradient).
struct SharedStorage : torch::nn::Module {
  torch::Tensor a, b;
  SharedStorage() {
    a = register_parameter("a", torch::ones({4}));
    b = register_parameter("b", a.detach());
  }
};

TEST_F(TorchModelTest, DistinctParametersOverOneStorageAreRefusedOnEveryRank) {
  SharedStorage net;
  torch::optim::SGD opt(unique_parameters(net), torch::optim::SGDOptions(0.1));
  Engine engine(config(), comm_);
  try {
    TorchModel model(engine, net, opt);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: parameters 'a' and 'b' are different tensors over the same storage"),
              std::string::npos) << e.what();
  }
}

TEST_F(TorchModelTest, GradientsAreViewsOfTheBucketStorage) {
  torch::manual_seed(0);
  SmallCnn net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  TorchModel model(engine, net, opt);
  const std::vector<std::span<float>> spans = engine.gradient_sync()->gradient_spans();
  const auto params = net.named_parameters(true);
  for (const std::string& name : model.parameter_names()) {
    const torch::Tensor& g = params[name].grad();
    ASSERT_TRUE(g.defined()) << name;
    EXPECT_EQ(g.data_ptr<float>(), engine.gradient(name).data()) << name;
    const bool inside = std::any_of(spans.begin(), spans.end(), [&](std::span<float> s) {
      return g.data_ptr<float>() >= s.data() && g.data_ptr<float>() + g.numel() <= s.data() + s.size();
    });
    EXPECT_TRUE(inside) << name;
  }
  const Batch b = image_batch(0);
  model.backward(torch::nn::functional::cross_entropy(net.forward(shard(b.x, rank(), world())),
                                                      shard(b.y, rank(), world())));
  // Still the views after backward (torch accumulated in place), holding the reduced values.
  for (const std::string& name : model.parameter_names()) {
    EXPECT_EQ(params[name].grad().data_ptr<float>(), engine.gradient(name).data()) << name;
  }
  EXPECT_GT(params["fc2.weight"].grad().abs().sum().item<double>(), 0.0);
}

TEST_F(TorchModelTest, AModelMadeAgainWhileTheFirstLivesTakesTheGradientsOver) {
  // `model = std::make_unique<TorchModel>(...)` again: the new model is made while the first
  // still lives, and registering its parameters frees the buckets the first bound the .grads
  // to. The new model binds them to its buckets with their values, the first one's end leaves
  // them there, and training goes on.
  torch::manual_seed(0);
  SmallCnn net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  auto model = std::make_unique<TorchModel>(engine, net, opt);
  const Batch b = image_batch(0);
  const auto loss = [&] {
    return torch::nn::functional::cross_entropy(net.forward(shard(b.x, rank(), world())),
                                                shard(b.y, rank(), world()));
  };
  model->backward(loss());
  const auto params = net.named_parameters(true);
  std::vector<torch::Tensor> reduced;
  for (const std::string& name : model->parameter_names()) {
    reduced.push_back(params[name].grad().clone());
  }
  model = std::make_unique<TorchModel>(engine, net, opt);
  const std::vector<std::string> names = model->parameter_names();
  ASSERT_EQ(names.size(), reduced.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    const torch::Tensor& g = params[names[k]].grad();
    EXPECT_EQ(g.data_ptr<float>(), engine.gradient(names[k]).data()) << names[k];
    EXPECT_TRUE(torch::equal(g, reduced[k])) << names[k];
  }
  model->zero_grad();
  model->backward(loss());  // the same parameters and batch: the same reduced gradients
  for (std::size_t k = 0; k < names.size(); ++k) {
    EXPECT_TRUE(torch::equal(params[names[k]].grad(), reduced[k])) << names[k];
  }
  EXPECT_TRUE(engine.step());
}

TEST_F(TorchModelTest, AccumulateGradFiresOncePerBackwardForATiedWeight) {
  torch::manual_seed(0);
  TiedNet net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  TorchModel model(engine, net, opt);
  for (int step = 0; step < 3; ++step) {
    const Batch b = token_batch(step);
    model.backward(torch::nn::functional::cross_entropy(net.forward(b.x), b.y));
    engine.step();
    model.zero_grad();
  }
  // embed.weight is used twice per forward (lookup and output layer): one hook call each
  // backward, after both contributions.
  EXPECT_EQ(model.ready_counts(), (std::vector<std::uint64_t>{3, 3, 3}));
}

TEST_F(TorchModelTest, BucketsAreLaunchedDuringBackwardAndNothingInsideNoSync) {
  torch::manual_seed(0);
  SmallCnn net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  TorchModel model(engine, net, opt);
  const std::size_t buckets = engine.gradient_sync()->buckets().size();
  ASSERT_GE(buckets, 2u);
  const Batch b = image_batch(0);
  auto loss = [&] {
    return torch::nn::functional::cross_entropy(net.forward(shard(b.x, rank(), world())),
                                                shard(b.y, rank(), world()));
  };
  {
    auto guard = engine.no_sync();
    const std::uint64_t before = comm_.collectives_issued();
    model.backward(loss());
    model.backward(loss());
    EXPECT_EQ(comm_.collectives_issued(), before);  // no collective inside no_sync
  }
  model.backward(loss());
  // Every bucket was launched from an AccumulateGrad hook, i.e. before backward returned
  // (GradientSync counts launches from mark_ready; on one rank nothing is communicated).
  if (world() > 1) {
    EXPECT_EQ(engine.last_backward().buckets_launched_early, buckets);
  }
  EXPECT_EQ(engine.last_backward().buckets, buckets);
}

TEST_F(TorchModelTest, SetToNoneZeroGradGivesAClearErrorAndZeroGradRebinds) {
  torch::manual_seed(0);
  SmallCnn net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  TorchModel model(engine, net, opt);
  net.zero_grad(/*set_to_none=*/true);
  const Batch b = image_batch(0);
  try {
    model.backward(torch::nn::functional::cross_entropy(net.forward(b.x), b.y));
    FAIL() << "no error";
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("TorchModel::backward (rank " + std::to_string(rank()) +
                        "): the .grad of parameter 'conv.weight' is undefined (set to None)"),
              std::string::npos) << what;
    EXPECT_NE(what.find("call the engine's zero_grad (TorchModel::zero_grad), which binds the "
                        "views again"),
              std::string::npos) << what;
  }
  // As the message says: TorchModel::zero_grad binds the views again, and training goes on
  // with every .grad in its bucket slot, reduced (the same on every rank).
  model.zero_grad();
  model.backward(torch::nn::functional::cross_entropy(net.forward(b.x), b.y));
  for (const auto& item : net.named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& p = item.value();
    const std::span<float> slot = engine.gradient(name);
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().data_ptr(), static_cast<void*>(slot.data())) << name;
    // A checksum of the bit patterns, the same on every rank.
    std::int64_t bits = 0;
    for (float v : slot) {
      std::uint32_t u = 0;
      std::memcpy(&u, &v, sizeof u);
      bits = bits * 31 + u;
    }
    EXPECT_EQ(comm_.allreduce_value(bits, ReduceOp::max),
              comm_.allreduce_value(bits, ReduceOp::min))
        << name;
  }
}

// ---- equivalence: 2 ranks x 32 == 1 rank x 64 -------------------------------------------------

TEST_F(TorchModelTest, CnnRanksTimesBatchEqualsOneProcessWithTheGlobalBatch) {
  EXPECT_LT((engine_against_plain_torch<SmallCnn>(comm_, image_batch)), 1e-5);
}

TEST_F(TorchModelTest, TiedWeightsRanksTimesBatchEqualsOneProcessWithTheGlobalBatch) {
  EXPECT_LT((engine_against_plain_torch<TiedNet>(comm_, token_batch)), 1e-5);
}

// ---- BatchNorm buffers ------------------------------------------------------------------------

TEST_F(TorchModelTest, BatchNormBuffersAreEqualOnEveryRankAfterEachBroadcast) {
  torch::manual_seed(0);
  BnCnn net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  Engine engine(config(), comm_);
  TorchModel model(engine, net, opt);
  const std::vector<std::string> expected{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"};
  EXPECT_EQ(model.buffer_names(), expected);
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> mine_before = all_values(net);
    model.before_forward();
    const std::vector<float> mine = all_values(net);
    const std::vector<float> all = engine.gather(std::span<const float>(mine));
    const std::vector<float> rank0(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()));
    EXPECT_TRUE(same_bits(mine, rank0)) << "step " << step;
    if (rank() == 0) {
      EXPECT_TRUE(same_bits(mine, mine_before));
    }
    // Each rank's own batch: its running statistics diverge in forward.
    const Batch b = image_batch(step);
    model.backward(torch::nn::functional::cross_entropy(net.forward(shard(b.x, rank(), world())),
                                                        shard(b.y, rank(), world())));
    engine.step();
    model.zero_grad();
  }
  EXPECT_EQ(net.bn->num_batches_tracked.item<std::int64_t>(), 4);
}

// ---- checkpoints ------------------------------------------------------------------------------

// Trains a BnCnn on a synthetic data set (64 examples, global batch 16: 4 batches an epoch)
// through the engine's loader; `steps` steps from where the engine stands.
struct BnRun {
  std::shared_ptr<data::SyntheticDataset> dataset;
  BnCnn net;
  torch::optim::AdamW opt{unique_parameters(net), torch::optim::AdamWOptions(1e-2)};
  Engine engine;
  data::DataLoader loader;
  TorchModel model;
  BnRun(const Communicator& comm, const std::filesystem::path& dir)
      : dataset(make_dataset()), engine(make_config(dir), comm),
        loader(engine.make_loader(dataset, loader_options())), model(engine, net, opt) {
    engine.prepare_loader(loader, true);
  }
  static std::shared_ptr<data::SyntheticDataset> make_dataset() {
    data::SyntheticOptions o;
    o.size = 64;
    o.feature_dim = 64;
    o.num_classes = 10;
    return std::make_shared<data::SyntheticDataset>(o);
  }
  static EngineConfig make_config(const std::filesystem::path& dir) {
    EngineConfig c;
    c.project.project_dir = dir;
    return c;
  }
  data::DataLoaderOptions loader_options() const {
    data::DataLoaderOptions o;
    o.batch_size = 16;
    o.split_batches = false;
    o.seed = 3;
    return o;
  }
  void train(int steps) {
    for (int s = 0; s < steps; ++s) {
      data::Batch batch;
      if (!engine.next_batch(batch)) {
        ASSERT_TRUE(engine.next_batch(batch));
      }
      const auto rows = static_cast<std::int64_t>(batch.labels.size());
      const torch::Tensor x = torch::from_blob(batch.features.data(), {rows, 1, 8, 8}).clone();
      const torch::Tensor y = torch::from_blob(batch.labels.data(), {rows}, torch::kInt).to(torch::kLong);
      model.backward(torch::nn::functional::cross_entropy(model.forward(net, x), y));
      engine.step();
      model.zero_grad();
    }
  }
};

TEST_F(TorchModelTest, MidEpochSaveAndLoadContinuesBitwise) {
  SharedTempDir dir(comm_, "torch_resume");
  torch::manual_seed(0);
  BnRun first(comm_, dir.path());
  first.train(3);  // 3 of the epoch's batches (at 1 rank: 3 of 4; at 2 ranks: 3 of 2 -> epoch 1)
  first.engine.save_state();
  first.train(5);
  const std::vector<float> expected = all_values(first.net);

  torch::manual_seed(99);  // other initial weights: all must come from the checkpoint
  BnRun second(comm_, dir.path());
  second.engine.load_state();
  EXPECT_EQ(second.engine.step_count(), 3u);
  second.train(5);
  EXPECT_TRUE(same_bits(all_values(second.net), expected));
}

TEST_F(TorchModelTest, ACheckpointSavedAtTwoRanksLoadsAtOne) {
  if (world() != 2) GTEST_SKIP() << "needs 2 ranks";
  SharedTempDir dir(comm_, "torch_two_to_one");
  torch::manual_seed(0);
  BnRun first(comm_, dir.path());
  first.train(2);
  const std::filesystem::path saved = first.engine.save_state().dir;
  const std::vector<float> values = all_values(first.net);
  comm_.barrier();
  if (rank() == 0) {
    const Communicator self = Communicator::self(runtime_);
    torch::manual_seed(5);
    BnRun one(self, dir.path() / "one");
    const Engine::LoadReport report = one.engine.load_state(saved);
    EXPECT_FALSE(report.warnings.empty());  // "saved by 2 ranks and is loaded by 1"
    EXPECT_TRUE(same_bits(all_values(one.net), values));
    EXPECT_EQ(one.engine.step_count(), 2u);
    one.train(1);  // and it trains on
  }
  comm_.barrier();
}

}  // namespace
}  // namespace mpitrain::libtorch
