// ZeRO stage 1 (distributed.zero_stage = 1) against stage 0: the same training gives the same
// losses and weights, with clipping, accumulation and no_sync, fp16 skips decided on every
// rank, and optimizer state sized to this rank's shard (Engine::memory_report).
//
// Why bitwise: these tests run on one node, where the fp32 buckets of stage 0 are allreduced
// by the shm algorithm (GradientSync forces it for fp32 buckets in the shared segment) and
// the stage 1 reduce-scatter's default is shm at every size (collectives/
// algorithm_selection.cpp). Both compute element i on exactly one rank as
// ((x0 + x1) + x2) + ... in rank order (collectives/detail/shm_collectives.hpp), so each
// rank's shard holds the very bits the allreduce gives; AdamW and SGD update element by
// element (nn/adamw.cpp writes every fused operation explicitly), so stepping a piece of a
// parameter gives the bits stepping the whole parameter gives. clip_grad_norm (2-norm) is
// the exception: its squared norm is summed shard by shard and then across ranks, another
// order than stage 0's, so the norm (and all that follows) agrees to rounding only.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/data/data_loader.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/nn/adamw.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"

namespace mpitrain {
namespace {

using testing::flatten;
using testing::identical_on_all_ranks;
using testing::same_bits;

constexpr std::size_t kFeatures = 8;
constexpr std::size_t kClasses = 4;
constexpr std::size_t kBatch = 4;  // per rank
const std::vector<std::size_t> kHidden = {16, 12};
const std::vector<std::size_t> kWide = {64, 64};

std::shared_ptr<const data::Dataset> synthetic(std::size_t size) {
  data::SyntheticOptions o;
  o.size = size;
  o.feature_dim = kFeatures;
  o.num_classes = kClasses;
  o.seed = 3;
  o.noise_std = 0.8f;
  return std::make_shared<data::SyntheticDataset>(o);
}

enum class Clip { none, norm2, norm_inf, value };

struct RunOptions {
  int zero_stage = 0;
  std::size_t steps = 200;  // optimizer steps
  std::size_t accumulation = 1;
  Clip clip = Clip::none;
  bool sgd = false;
  bool explicit_no_sync = false;  // accumulate with no_sync() instead of accumulation steps
  DType wire = DType::f32;
  bool overlap = true;
};

struct RunResult {
  std::vector<float> losses;   // every micro-step's loss on this rank
  std::vector<double> norms;   // clip_grad_norm's results
  std::vector<float> weights;  // after the last step
  bool identical = true;       // weights bit-identical on every rank after every step
};

// Trains a small MLP (several buckets: parameters straddle the ranks' blocks).
RunResult train(const Communicator& comm, const RunOptions& o) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  EngineConfig config;
  config.zero_stage = o.zero_stage;
  config.first_bucket_mb = 1e-4;
  config.bucket_cap_mb = 3e-4;
  config.grad_comm_dtype = o.wire;
  config.overlap = o.overlap;
  config.gradient_accumulation_steps = o.explicit_no_sync ? 1 : o.accumulation;
  nn::Sequential model = nn::make_mlp(kFeatures, kHidden, kClasses, nn::Activation::relu, 0.0f, 7);
  nn::AdamW adamw(model.parameters(), {});
  nn::SgdOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  nn::Sgd sgd(model.parameters(), so);
  data::DataLoaderOptions lo;
  lo.batch_size = kBatch;
  lo.shuffle = true;
  lo.seed = 5;
  data::DataLoader loader(synthetic(25 * n * kBatch), lo);
  Engine engine(config, comm);
  engine.prepare(model, o.sgd ? static_cast<nn::Optimizer&>(sgd) : adamw, loader);
  RunResult r;
  data::Batch b;
  std::size_t micro = 0;
  while (engine.step_count() < o.steps) {
    if (!engine.next_batch(b)) continue;  // next epoch
    ++micro;
    Tensor logits = model.forward(b.features);
    nn::LossResult loss = nn::cross_entropy(logits, b.labels);
    r.losses.push_back(loss.loss);
    if (o.explicit_no_sync && micro % o.accumulation != 0) {
      auto guard = engine.no_sync();
      engine.backward(loss.grad);
      continue;
    }
    engine.backward(loss.grad);
    if (!engine.sync_gradients()) continue;
    if (o.clip == Clip::norm2) r.norms.push_back(engine.clip_grad_norm(0.5));
    if (o.clip == Clip::norm_inf) r.norms.push_back(engine.clip_grad_norm(0.05, INFINITY));
    if (o.clip == Clip::value) engine.clip_grad_value(0.01);
    engine.step();
    engine.zero_grad();
    r.identical = r.identical && identical_on_all_ranks(comm, flatten(model.parameters()));
  }
  r.weights = flatten(model.parameters());
  return r;
}

// Returns max |a - b| / max |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

class ZeroTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
};

void expect_bitwise(const RunResult& zero, const RunResult& base) {
  EXPECT_TRUE(zero.identical);
  ASSERT_EQ(zero.losses.size(), base.losses.size());
  EXPECT_TRUE(same_bits(zero.losses, base.losses));
  EXPECT_TRUE(same_bits(zero.weights, base.weights))
      << "relative error " << relative_error(zero.weights, base.weights);
}

TEST_F(ZeroTest, Stage1EqualsStage0BitwiseWithAdamWFor200Steps) {
  RunOptions o;
  const RunResult base = train(comm_, o);
  o.zero_stage = 1;
  const RunResult zero = train(comm_, o);
  expect_bitwise(zero, base);
}

TEST_F(ZeroTest, Stage1EqualsStage0BitwiseWithSgdMomentum) {
  RunOptions o;
  o.sgd = true;
  o.steps = 40;
  const RunResult base = train(comm_, o);
  o.zero_stage = 1;
  expect_bitwise(train(comm_, o), base);
}

TEST_F(ZeroTest, OverlapOffIsBitwiseToo) {
  RunOptions o;
  o.steps = 30;
  o.overlap = false;
  const RunResult base = train(comm_, o);
  o.zero_stage = 1;
  expect_bitwise(train(comm_, o), base);
}

TEST_F(ZeroTest, AccumulationAndNoSyncAreBitwiseUnderStage1) {
  for (bool explicit_no_sync : {false, true}) {
    RunOptions o;
    o.steps = 30;
    o.accumulation = 3;
    o.explicit_no_sync = explicit_no_sync;
    const RunResult base = train(comm_, o);
    o.zero_stage = 1;
    SCOPED_TRACE(explicit_no_sync ? "no_sync" : "gradient_accumulation_steps");
    expect_bitwise(train(comm_, o), base);
  }
}

TEST_F(ZeroTest, ClipByValueAndByInfinityNormAreBitwiseUnderStage1) {
  for (Clip clip : {Clip::value, Clip::norm_inf}) {
    RunOptions o;
    o.steps = 40;
    o.clip = clip;
    const RunResult base = train(comm_, o);
    o.zero_stage = 1;
    const RunResult zero = train(comm_, o);
    expect_bitwise(zero, base);
    ASSERT_EQ(zero.norms.size(), base.norms.size());
    EXPECT_TRUE(base.norms.empty() ||  // memcmp must not see an empty vector's null data()
                std::memcmp(zero.norms.data(), base.norms.data(), base.norms.size() * sizeof(double)) == 0);
  }
}

TEST_F(ZeroTest, ClipGradNormUsesTheGlobalNormFromTheShards) {
  RunOptions o;
  o.steps = 40;
  o.clip = Clip::norm2;
  const RunResult base = train(comm_, o);
  o.zero_stage = 1;
  const RunResult zero = train(comm_, o);
  EXPECT_TRUE(zero.identical);
  ASSERT_EQ(zero.norms.size(), base.norms.size());
  // The norms clip (they are > 0.5): a per-rank norm would be smaller and clip differently.
  for (std::size_t i = 0; i < base.norms.size(); ++i) {
    EXPECT_NEAR(zero.norms[i], base.norms[i], 1e-12 * base.norms[i]) << "step " << i;
  }
  EXPECT_LT(relative_error(zero.weights, base.weights), 1e-6);
}

TEST_F(ZeroTest, SixteenBitWiresTrainUnderStage1) {
  for (DType wire : {DType::bf16, DType::f16}) {
    RunOptions o;
    o.steps = 30;
    o.wire = wire;
    const RunResult base = train(comm_, o);
    o.zero_stage = 1;
    const RunResult zero = train(comm_, o);
    EXPECT_TRUE(zero.identical);
    // The same 16-bit roundings in the same rank order on one node (shm both ways); at most
    // the ring's order differs, so agreement to 16-bit rounding is what is asserted.
    EXPECT_LT(relative_error(zero.weights, base.weights), 1e-2) << to_string(wire);
  }
}

// Bring-your-own parameters "a" (100 values) and "b" (60): b comes first in the flat layout
// (reverse registration order), so b[0] lies in rank 0's block.
struct Own {
  std::vector<float> a = std::vector<float>(100, 1.0f), ga = std::vector<float>(100, 0.0f);
  std::vector<float> b = std::vector<float>(60, -1.0f), gb = std::vector<float>(60, 0.0f);
};

// Four fp16 steps; in the second, the LAST rank alone puts an inf into b[0], which lands in
// rank 0's shard. Returns the weights.
std::vector<float> fp16_run(const Communicator& comm, int stage) {
  EngineConfig config;
  config.mixed_precision = Precision::fp16;
  config.zero_stage = stage;
  Own own;
  Engine engine(config, comm);
  engine.register_parameters({{"a", {100}, own.a, own.ga}, {"b", {60}, own.b, own.gb}});
  nn::AdamW opt(engine.parameters(), {});
  engine.set_optimizer(opt);
  const bool last = comm.rank() + 1 == comm.size();
  for (int step = 0; step < 4; ++step) {
    engine.backward([&] {
      const float s = engine.loss_gradient_scale();
      for (std::size_t i = 0; i < own.ga.size(); ++i) own.ga[i] += 0.01f * static_cast<float>(i + comm.rank()) * s;
      for (std::size_t i = 0; i < own.gb.size(); ++i) own.gb[i] -= 0.02f * static_cast<float>(i) * s;
      if (step == 1 && last) own.gb[0] = std::numeric_limits<float>::infinity();
      engine.grad_ready("b");
      engine.grad_ready("a");
    });
    const bool stepped = engine.step();
    EXPECT_EQ(stepped, step != 1) << "step " << step;
    EXPECT_EQ(engine.optimizer_step_was_skipped(), step == 1);
    engine.zero_grad();
  }
  EXPECT_EQ(engine.state().skipped_steps, 1u);
  EXPECT_EQ(engine.loss_scale(), 32768.0f);
  std::vector<float> w = own.a;
  w.insert(w.end(), own.b.begin(), own.b.end());
  EXPECT_TRUE(identical_on_all_ranks(comm, w));
  return w;
}

TEST_F(ZeroTest, Fp16OverflowOnAnyShardSkipsTheStepOnEveryRank) {
  const std::vector<float> base = fp16_run(comm_, 0);
  const std::vector<float> zero = fp16_run(comm_, 1);
  EXPECT_TRUE(same_bits(zero, base));
}

TEST_F(ZeroTest, NanPolicyErrorNamesTheFirstNonFiniteParameterOnEveryRank) {
  EngineConfig config;
  config.zero_stage = 1;
  Own own;
  Engine engine(config, comm_);
  engine.register_parameters({{"a", {100}, own.a, own.ga}, {"b", {60}, own.b, own.gb}});
  nn::AdamW opt(engine.parameters(), {});
  engine.set_optimizer(opt);
  engine.backward([&] {
    if (comm_.rank() + 1 == comm_.size()) own.ga[99] = NAN;
    engine.grad_ready("b");
    engine.grad_ready("a");
  });
  try {
    engine.step();
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("first in 'a'"), std::string::npos) << e.what();
  }
}

// Unused parameters under stage 1: policy zero steps with what the slots hold (the same as
// stage 0), policy error raises on every rank naming the rank and the parameter.
TEST_F(ZeroTest, UnusedParameterPoliciesWorkUnderStage1) {
  for (UnusedParameterPolicy policy : {UnusedParameterPolicy::zero, UnusedParameterPolicy::error}) {
    std::vector<float> weights[2];
    std::string errors[2];
    for (int stage : {0, 1}) {
      EngineConfig config;
      config.zero_stage = stage;
      config.unused_parameters = policy;
      Own own;
      Engine engine(config, comm_);
      engine.register_parameters({{"a", {100}, own.a, own.ga}, {"b", {60}, own.b, own.gb}});
      nn::AdamW opt(engine.parameters(), {});
      engine.set_optimizer(opt);
      try {
        engine.backward([&] {
          for (std::size_t i = 0; i < own.gb.size(); ++i) own.gb[i] += 0.5f * static_cast<float>(i);
          engine.grad_ready("b");
          if (comm_.rank() != 0) engine.grad_ready("a");  // rank 0 leaves 'a' unused
        });
        engine.step();
      } catch (const std::runtime_error& e) {
        errors[stage] = e.what();
      }
      weights[stage] = own.a;
      weights[stage].insert(weights[stage].end(), own.b.begin(), own.b.end());
    }
    EXPECT_TRUE(same_bits(weights[1], weights[0]));
    if (policy == UnusedParameterPolicy::error && comm_.size() > 1) {
      EXPECT_NE(errors[1].find("rank 0: a"), std::string::npos) << errors[1];
    } else if (policy == UnusedParameterPolicy::zero) {
      EXPECT_EQ(errors[1], "");
    }
    EXPECT_EQ(errors[1].empty(), errors[0].empty());
  }
}

TEST_F(ZeroTest, OptimizerStateIsShardedInTheMemoryReport) {
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  MemoryReport reports[2];
  for (int stage : {0, 1}) {
    EngineConfig config;
    config.zero_stage = stage;
    nn::Sequential model = nn::make_mlp(kFeatures, kWide, kClasses, nn::Activation::relu, 0.0f, 7);
    nn::AdamW opt(model.parameters(), {});
    Engine engine(config, comm_);
    engine.prepare(model, opt);
    reports[stage] = engine.memory_report();
    ASSERT_EQ(engine.gradient_sync()->buckets().size(), 1u);  // the default 25 MiB bucket
  }
  const MemoryReport& base = reports[0];
  const MemoryReport& zero = reports[1];
  EXPECT_EQ(base.parameter_bytes, zero.parameter_bytes);
  std::size_t values = 0;
  for (std::size_t v : std::vector<std::size_t>{kFeatures * 64 + 64, 64 * 64 + 64, 64 * kClasses + kClasses}) {
    values += v;
  }
  EXPECT_EQ(base.parameter_bytes, values * sizeof(float));
  EXPECT_EQ(base.optimizer_state_bytes, 2 * values * sizeof(float));  // AdamW: m and v
  // 1/n of stage 0 plus at most one bucket's padding (16 values per block), and the ranks'
  // shards together are exactly stage 0's state.
  const std::size_t padding = 2 * 16 * sizeof(float);
  EXPECT_LE(zero.optimizer_state_bytes, base.optimizer_state_bytes / n + padding);
  const std::size_t total =
      static_cast<std::size_t>(comm_.allreduce_value(static_cast<double>(zero.optimizer_state_bytes), ReduceOp::sum));
  EXPECT_EQ(total, base.optimizer_state_bytes);
  if (n > 1) {
    EXPECT_GT(zero.comm_bytes, base.comm_bytes);  // the shard buffer
  }
}

TEST_F(ZeroTest, Stage1WithoutAnOptimizerRefusesToStep) {
  // Bring your own model with no optimizer: at stage 1 each rank would hold only its shard
  // of the averaged gradient and nothing would gather parameters, so step() refuses (on one
  // rank stage 1 is stage 0, and the step goes on).
  EngineConfig config;
  config.zero_stage = 1;
  Engine engine(config, comm_);
  std::vector<float> w(40, 1.0f);
  engine.register_parameters({{"w", {40}, w, {}}});
  engine.backward([&] {
    for (float& v : engine.gradient("w")) v = engine.loss_gradient_scale();
    engine.grad_ready(0);
  });
  if (comm_.size() == 1) {
    EXPECT_NO_THROW(engine.step());
    return;
  }
  try {
    engine.step();
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "Engine::step (rank " + std::to_string(comm_.rank()) +
                  "): distributed.zero_stage = 1 needs an optimizer (prepare's, or "
                  "Engine::set_optimizer) to step the shards and gather the parameters");
  }
}

TEST(ZeroConfig, ZeroStageMustBeZeroOrOne) {
  EngineConfig config;
  config.zero_stage = 2;
  try {
    config.validate();
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "EngineConfig: distributed.zero_stage = 2 is invalid: must be 0 (no sharding) or "
                 "1 (optimizer state sharded across ranks)");
  }
  config.zero_stage = 1;
  EXPECT_NO_THROW(config.validate());
}

}  // namespace
}  // namespace mpitrain
