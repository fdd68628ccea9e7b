// The Engine's features on libtorch models (TorchModel), at 1 and 2 ranks: accumulation,
// clipping, fp16 loss scaling with skipped steps, bf16 autocast, 16-bit gradient wires,
// gather on torch tensors, torch::jit modules, the torch optimizers' checkpointed state and
// save_model / load_model. Equivalence metric: max |a - b| / max |b| over all parameters.

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "../checkpoint/checkpoint_test_util.hpp"
#include "mpitrain/checkpoint/h5_file.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/engine/engine.hpp"
#include "mpitrain/torch/torch_model.hpp"
#include "mpitrain/torch/torch_optimizer.hpp"
#include "torch_test_models.hpp"

namespace mpitrain::libtorch {
namespace {

using checkpoint::testing::SharedTempDir;
using namespace mpitrain::libtorch::testing;

// Returns every rank's `values` concatenated in rank order. Collective.
std::vector<float> engine_free_gather(const Communicator& comm, const std::vector<float>& values) {
  std::vector<float> out(values.size() * static_cast<std::size_t>(comm.size()));
  comm.allgather(std::span<const float>(values), std::span<float>(out));
  return out;
}

class TorchEngineFeatures : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  int rank() const { return comm_.rank(); }
  int world() const { return comm_.size(); }
};

// ---- accumulation and clipping against plain torch on the global batch -------------------------

TEST_F(TorchEngineFeatures, AccumulationOverTwoMicroBatchesEqualsTheGlobalBatch) {
  TrainOptions o;
  o.accumulation = 2;
  EXPECT_LT((engine_against_plain_torch<SmallCnn>(comm_, image_batch, o)), 1e-5);
}

TEST_F(TorchEngineFeatures, ClipGradNormEqualsTorchClipGradNorm) {
  TrainOptions o;
  o.clip_norm = 0.05;  // below the gradients' norm: every step clips
  EXPECT_LT((engine_against_plain_torch<SmallCnn>(comm_, image_batch, o)), 1e-5);
}

TEST_F(TorchEngineFeatures, ClipGradValueEqualsTorchClipGradValue) {
  TrainOptions o;
  o.clip_value = 0.01;
  EXPECT_LT((engine_against_plain_torch<SmallCnn>(comm_, image_batch, o)), 1e-5);
}

// ---- precision -------------------------------------------------------------------------------

// fp16 loss scaling on an fp32 forward (libtorch 1.13's CPU autocast has no fp16): the scale
// 2^16 is removed exactly, so the training equals fp32's.
TEST_F(TorchEngineFeatures, Fp16LossScalingEqualsFp32Training) {
  TrainOptions o;
  o.config.mixed_precision = Precision::fp16;
  EXPECT_LT((engine_against_plain_torch<SmallCnn>(comm_, image_batch, o)), 1e-5);
}

// Inputs of magnitude 1e36 give true gradients near 1e36 (finite in fp32) that overflow once
// multiplied by the loss scale 2^16: fp16's situation, with fp32 as the narrow format.
TEST_F(TorchEngineFeatures, Fp16OverflowSkipsTheTorchOptimizerStepAndBacksOff) {
  torch::manual_seed(0);
  SmallCnn net;
  torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
  EngineConfig c = small_buckets();
  c.mixed_precision = Precision::fp16;
  Engine engine(c, comm_);
  TorchModel model(engine, net, opt);
  const std::vector<float> before = all_values(net);
  const Batch b = image_batch(0);
  const torch::Tensor x = shard(b.x, rank(), world()) * 1e36;
  auto run_step = [&] {
    model.backward(torch::nn::functional::cross_entropy(net.forward(x), shard(b.y, rank(), world())));
    const bool updated = engine.step();
    model.zero_grad();
    return updated;
  };
  EXPECT_FALSE(run_step());
  EXPECT_TRUE(engine.optimizer_step_was_skipped());
  EXPECT_TRUE(same_bits(all_values(net), before));  // torch's step did not run
  EXPECT_TRUE(opt.state().empty());
  EXPECT_EQ(engine.state().skipped_steps, 1u);
  EXPECT_EQ(engine.loss_scale(), 32768.0f);
  int updated = 0;
  for (int s = 0; s < 30 && updated == 0; ++s) updated += run_step() ? 1 : 0;
  EXPECT_EQ(updated, 1);  // the scale backed off until the scaled gradients fit
  EXPECT_FALSE(same_bits(all_values(net), before));
  EXPECT_EQ(engine.state().skipped_steps, engine.step_count() - 1);
  EXPECT_FALSE(opt.state().empty());
}

TEST_F(TorchEngineFeatures, Bf16AutocastRunsRealBf16KernelsAndTrainsLikeFp32) {
  EngineConfig c = small_buckets();
  c.mixed_precision = Precision::bf16;
  auto accuracy_after_training = [&](const EngineConfig& config, bool check_dtype) {
    torch::manual_seed(3);
    SmallCnn net;
    torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
    Engine engine(config, comm_);
    TorchModel model(engine, net, opt);
    // A learnable task: the label is the sign pattern of the mean of four image quadrants.
    auto make = [](int step, std::int64_t rows = 64) {
      torch::manual_seed(500 + step);
      torch::Tensor x = torch::randn({rows, 1, 8, 8});
      torch::Tensor q = x.reshape({rows, 2, 4, 2, 4}).mean({2, 4}).reshape({rows, 4});
      torch::Tensor y = ((q > 0).to(torch::kLong) * torch::tensor({1, 2, 4, 0})).sum(1);
      return Batch{x, y};
    };
    for (int step = 0; step < 150; ++step) {
      const Batch b = make(step);
      torch::Tensor loss;
      {
        auto autocast = model.autocast();
        torch::Tensor logits = net.forward(shard(b.x, rank(), world()));
        if (check_dtype && step == 0) {
          EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);  // linear ran in bf16
        }
        loss = torch::nn::functional::cross_entropy(logits, shard(b.y, rank(), world()));
      }
      EXPECT_EQ(loss.scalar_type(), torch::kFloat);  // losses in fp32, as torch.autocast
      model.backward(loss);
      engine.step();
      model.zero_grad();
    }
    torch::NoGradGuard no_grad;
    const Batch test = make(10000, 2048);
    const torch::Tensor x = shard(test.x, rank(), world());
    const torch::Tensor correct = (net.forward(x).argmax(1) == shard(test.y, rank(), world())).to(torch::kLong);
    const torch::Tensor all = model.gather_for_metrics(correct, static_cast<std::size_t>(x.size(0)));
    return 100.0 * all.to(torch::kDouble).mean().item<double>();
  };
  const double fp32 = accuracy_after_training(small_buckets(), false);
  const double bf16 = accuracy_after_training(c, true);
  EXPECT_GT(fp32, 40.0);  // it learned (8 classes: chance is 12.5%)
  EXPECT_NEAR(bf16, fp32, 1.0);  // within 1 point, on 2048 test examples
  std::printf("[rank %d] accuracy fp32 %.2f%%, bf16 autocast %.2f%%\n", rank(), fp32, bf16);
  EXPECT_FALSE(at::autocast::is_cpu_enabled());  // the guard restored the state
}

// One synchronised backward with a 16-bit wire against the fp32 wire, same model and data:
// the reduced .grad differ by the wire's rounding only (each rank's gradient / n and the
// partial sums rounded to 16 bits: at most 2 ulps of the largest gradient), are identical on
// every rank, and on one rank (nothing sent) equal the fp32 ones exactly.
TEST_F(TorchEngineFeatures, SixteenBitGradientWiresRoundTheReducedGradientsOnly) {
  const Batch b = image_batch(0);
  auto reduced_grads = [&](DType wire) {
    torch::manual_seed(0);
    SmallCnn net;
    torch::optim::AdamW opt(unique_parameters(net), torch::optim::AdamWOptions(1e-2));
    EngineConfig c = small_buckets();
    c.grad_comm_dtype = wire;
    Engine engine(c, comm_);
    TorchModel model(engine, net, opt);
    model.backward(torch::nn::functional::cross_entropy(net.forward(shard(b.x, rank(), world())),
                                                        shard(b.y, rank(), world())));
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : unique_parameters(net)) grads.push_back(p.grad().flatten().clone());
    return torch::cat(grads);
  };
  const torch::Tensor fp32 = reduced_grads(DType::f32);
  const double largest = fp32.abs().max().item<double>();
  for (const auto& [wire, ulp] : {std::pair{DType::bf16, 1.0 / 128}, std::pair{DType::f16, 1.0 / 1024}}) {
    const torch::Tensor g = reduced_grads(wire);
    const double diff = (g - fp32).abs().max().item<double>();
    EXPECT_LE(diff, 2 * ulp * largest) << to_string(wire);
    if (world() == 1) {
      EXPECT_EQ(diff, 0.0) << to_string(wire);
    } else {
      EXPECT_GT(diff, 0.0) << to_string(wire);  // the wire really was 16-bit
    }
    const std::vector<float> mine(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    const std::vector<float> all = engine_free_gather(comm_, mine);
    for (int r = 1; r < world(); ++r) {
      EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + r * g.numel())) << to_string(wire);
    }
  }
}

TEST_F(TorchEngineFeatures, AnOptimizerHoldingATiedWeightTwiceIsRefused) {
  torch::manual_seed(0);
  TiedNet net;
  torch::optim::AdamW opt(net.parameters(), torch::optim::AdamWOptions(1e-2));  // embed.weight twice
  Engine engine(small_buckets(), comm_);
  try {
    TorchModel model(engine, net, opt);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'embed.weight' appears twice in the torch optimizer"),
              std::string::npos) << e.what();
  }
}

// ---- gather on torch tensors -------------------------------------------------------------------

TEST_F(TorchEngineFeatures, GatherAndGatherForMetricsConcatenateTheRanksRows) {
  torch::manual_seed(0);
  SmallCnn net;
  torch::optim::SGD opt(unique_parameters(net), torch::optim::SGDOptions(0.1));
  Engine engine(small_buckets(), comm_);
  TorchModel model(engine, net, opt);
  // Rank r holds r + 1 rows of 3 values: 100 r + 3 row + column.
  const torch::Tensor mine = torch::arange(3 * (rank() + 1), torch::kFloat).reshape({rank() + 1, 3}) +
                             100.0 * rank();
  const torch::Tensor all = model.gather(mine);
  ASSERT_EQ(all.size(0), static_cast<std::int64_t>(world() * (world() + 1) / 2));
  ASSERT_EQ(all.size(1), 3);
  std::int64_t row = 0;
  for (int r = 0; r < world(); ++r) {
    for (std::int64_t i = 0; i < r + 1; ++i, ++row) {
      EXPECT_EQ(all[row][2].item<float>(), 100.0f * static_cast<float>(r) + 3.0f * static_cast<float>(i) + 2.0f);
    }
  }
  // One real row per rank (the rest padding), as int64 labels.
  const torch::Tensor labels = torch::full({rank() + 1}, rank(), torch::kLong);
  const torch::Tensor real = model.gather_for_metrics(labels, 1);
  EXPECT_TRUE(torch::equal(real, torch::arange(world(), torch::kLong)));
}

// ---- torch::jit modules ------------------------------------------------------------------------

TEST_F(TorchEngineFeatures, PreparesATorchScriptModule) {
  torch::manual_seed(0);
  torch::jit::Module m("Affine");
  m.register_parameter("w", torch::randn({4, 3}).requires_grad_(), false);
  m.register_parameter("b", torch::zeros({3}).requires_grad_(), false);
  m.register_buffer("scale", torch::full({1}, 2.0f));
  m.define("def forward(self, x):\n    return (x.matmul(self.w) + self.b) * self.scale\n");
  std::vector<torch::Tensor> params;
  for (const auto& p : m.parameters()) params.push_back(p);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  Engine engine(small_buckets(), comm_);
  TorchModel model(engine, m, opt);
  EXPECT_EQ(model.parameter_names(), (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(model.buffer_names(), (std::vector<std::string>{"scale"}));
  const torch::Tensor w0 = params[0].detach().clone();
  torch::manual_seed(rank());  // different data on each rank
  const torch::Tensor x = torch::randn({8, 4});
  const torch::Tensor out = model.forward(m, std::vector<torch::jit::IValue>{x}).toTensor();
  model.backward(out.pow(2).mean());
  EXPECT_EQ(params[0].grad().data_ptr<float>(), engine.gradient("w").data());
  EXPECT_TRUE(engine.step());
  EXPECT_FALSE(torch::equal(params[0], w0));
  const std::vector<float> w(params[0].data_ptr<float>(), params[0].data_ptr<float>() + 12);
  const std::vector<float> every = engine.gather(std::span<const float>(w));
  for (int r = 1; r < world(); ++r) {  // the same update on every rank
    EXPECT_TRUE(std::equal(w.begin(), w.end(), every.begin() + 12 * r));
  }
}

TEST_F(TorchEngineFeatures, UniqueTrainedParametersOfATorchScriptModule) {
  // A weight registered under two names (tied) is listed once; a frozen one not at all.
  torch::jit::Module m("Tied");
  const torch::Tensor shared = torch::ones({2, 2}).requires_grad_();
  m.register_parameter("embed", shared, false);
  m.register_parameter("frozen", torch::ones({3}), false);
  m.register_parameter("head", shared, false);
  m.register_parameter("bias", torch::zeros({2}).requires_grad_(), false);
  const std::vector<torch::Tensor> got = unique_trained_parameters(m);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].is_same(shared));
  EXPECT_EQ(got[1].sizes().vec(), (std::vector<std::int64_t>{2}));
}

// ---- optimizer state: Adam, AdamW, SGD ---------------------------------------------------------

// Returns a torch optimizer of `kind` over `params`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind,
                                                        const std::vector<torch::Tensor>& params) {
  if (kind == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-2).amsgrad(true));
  if (kind == "adamw") return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-2));
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
}

// The tied-weight net and an optimizer, trained through the engine on the token batches.
struct TiedRun {
  TiedNet net;
  std::unique_ptr<torch::optim::Optimizer> opt;
  Engine engine;
  TorchModel model;
  TiedRun(const Communicator& comm, const std::string& kind)
      : opt(make_optimizer(kind, unique_parameters(net))), engine(small_buckets(), comm), model(engine, net, *opt) {}
  void train(int from, int steps) {
    for (int step = from; step < from + steps; ++step) {
      const Batch b = token_batch(step);
      const int r = engine.rank(), n = engine.world_size();
      model.backward(torch::nn::functional::cross_entropy(net.forward(shard(b.x, r, n)), shard(b.y, r, n)));
      engine.step();
      model.zero_grad();
    }
  }
};

class TorchOptimizerState : public TorchEngineFeatures, public ::testing::WithParamInterface<std::string> {};

TEST_P(TorchOptimizerState, SaveAndLoadContinueBitwise) {
  SharedTempDir dir(comm_, "torch_optimizer_" + GetParam());
  torch::manual_seed(0);
  TiedRun first(comm_, GetParam());
  first.train(0, 3);
  first.engine.save_state(dir.path() / "ckpt");
  first.train(3, 4);
  const std::vector<float> expected = all_values(first.net);

  torch::manual_seed(42);
  TiedRun second(comm_, GetParam());
  second.engine.load_state(dir.path() / "ckpt");
  second.train(3, 4);
  EXPECT_TRUE(same_bits(all_values(second.net), expected));
  EXPECT_EQ(second.opt->state().size(), first.opt->state().size());
  // The file holds the torch names and torch's slots.
  if (rank() == 0) {
    const checkpoint::H5File f = checkpoint::H5File::open_read_only(dir.path() / "ckpt" / "state.h5");
    const checkpoint::H5Group optimizer = f.root().open_group("optimizer");
    EXPECT_EQ(optimizer.read_string("kind"), "torch." + GetParam());
    const checkpoint::H5Group embed = optimizer.open_group("embed.weight");
    const std::vector<std::string> slots =
        GetParam() == "sgd" ? std::vector<std::string>{"momentum_buffer"}
        : GetParam() == "adam" ? std::vector<std::string>{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
                               : std::vector<std::string>{"exp_avg", "exp_avg_sq"};
    for (const std::string& slot : slots) EXPECT_TRUE(embed.is_tensor(slot)) << slot;
    if (GetParam() != "sgd") {
      EXPECT_EQ(embed.read_double_attribute("step"), 3.0);
    }
    EXPECT_TRUE(f.root().open_group("model").is_tensor("embed.weight"));
    EXPECT_FALSE(f.root().open_group("model").contains("head.weight"));  // one tensor, once
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, TorchOptimizerState, ::testing::Values("adam", "adamw", "sgd"));

// ---- the fused AdamW step --------------------------------------------------------------------

// Returns leaf parameters of the given shapes, from seed `seed`: contiguous ones and, with
// `transposed`, a non-contiguous one (the fused step must leave that to torch).
std::vector<at::Tensor> fused_test_params(std::uint64_t seed, bool transposed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> params = {torch::randn({7, 5}), torch::randn({1}), torch::randn({33})};
  if (transposed) params.push_back(torch::randn({4, 6}).t());
  for (at::Tensor& p : params) p = p.detach().requires_grad_(true);
  return params;
}

// Returns an AdamW over `params` in two groups with different hyper-parameters.
std::unique_ptr<torch::optim::AdamW> two_group_adamw(const std::vector<at::Tensor>& params, bool amsgrad) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>(params.begin(), params.begin() + 2),
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(3e-2).weight_decay(0.0).amsgrad(amsgrad)));
  groups.emplace_back(std::vector<at::Tensor>(params.begin() + 2, params.end()),
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-3).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1).amsgrad(amsgrad)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(1e-3));
}

// Returns every value of `params` and of their AdamW state, in order.
std::vector<float> params_and_state(const std::vector<at::Tensor>& params, torch::optim::AdamW& opt) {
  std::vector<float> out;
  auto put = [&](const at::Tensor& t) {
    const at::Tensor c = t.detach().contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  };
  for (const at::Tensor& p : params) {
    put(p);
    const auto it = opt.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == opt.state().end()) continue;
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.push_back(static_cast<float>(st.step()));
    put(st.exp_avg());
    put(st.exp_avg_sq());
    if (st.max_exp_avg_sq().defined()) put(st.max_exp_avg_sq());
  }
  return out;
}

class FusedAdamW : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(FusedAdamW, EqualsTorchsStepBitForBit) {
  const auto [amsgrad, transposed] = GetParam();
  const std::vector<at::Tensor> theirs = fused_test_params(7, transposed);
  const std::vector<at::Tensor> ours = fused_test_params(7, transposed);
  auto torch_opt = two_group_adamw(theirs, amsgrad);
  auto fused_opt = two_group_adamw(ours, amsgrad);
  std::unordered_map<const void*, std::string> names;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    names[ours[i].unsafeGetTensorImpl()] = std::to_string(i);  // a name only keys the state dict
  }
  TorchOptimizer fused(*fused_opt, names, true);
  torch::manual_seed(11);
  for (int step = 0; step < 6; ++step) {
    for (std::size_t i = 0; i < ours.size(); ++i) {
      // The last parameter gets no gradient at step 2: torch skips it and so must we.
      if (step == 2 && i + 1 == ours.size()) {
        theirs[i].mutable_grad() = at::Tensor();
        ours[i].mutable_grad() = at::Tensor();
        continue;
      }
      const at::Tensor g = torch::randn(ours[i].sizes()) * (step % 2 == 0 ? 1.0 : 1e-3);
      theirs[i].mutable_grad() = g.clone();
      ours[i].mutable_grad() = g.clone();
    }
    torch_opt->step();
    fused.step();
    // A non-contiguous parameter takes torch's step, except at step 2, where it has no
    // gradient: then the kernel and torch's step alternate on the same state.
    EXPECT_EQ(fused.last_step_fused(), !transposed || step == 2) << "step " << step;
  }
  const std::vector<float> expected = params_and_state(theirs, *torch_opt);
  EXPECT_TRUE(same_bits(params_and_state(ours, *fused_opt), expected));
  EXPECT_GE(expected.size(), 3U * (35 + 1 + 33));  // parameters and both moments were compared
}

INSTANTIATE_TEST_SUITE_P(AmsgradAndLayout, FusedAdamW, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(FusedAdamWStep, ChangesTheParametersInPlaceAndBumpsTheirVersion) {
  const std::vector<at::Tensor> params = fused_test_params(3, false);
  auto opt = two_group_adamw(params, false);
  std::unordered_map<const void*, std::string> names;
  for (std::size_t i = 0; i < params.size(); ++i) names[params[i].unsafeGetTensorImpl()] = std::to_string(i);
  TorchOptimizer fused(*opt, names, true);
  const float* before = params[0].data_ptr<float>();
  const auto version = params[0]._version();
  const float first = before[0];
  for (const at::Tensor& p : params) p.mutable_grad() = torch::ones(p.sizes());
  fused.step();
  ASSERT_TRUE(fused.last_step_fused());
  EXPECT_EQ(fused.state_values(), 2U * (35 + 1 + 33));  // m and v of every value (memory_report)
  EXPECT_EQ(params[0].data_ptr<float>(), before);
  EXPECT_NE(params[0].data_ptr<float>()[0], first);
  EXPECT_GT(params[0]._version(), version);
}

// ---- save_model / load_model -------------------------------------------------------------------

TEST_F(TorchEngineFeatures, SaveModelWritesEveryTorchNameAndLoadModelReadsIt) {
  SharedTempDir dir(comm_, "torch_save_model");
  torch::manual_seed(0);
  TiedRun first(comm_, "adamw");
  first.train(0, 2);
  const std::filesystem::path file = first.model.save_model(dir.path() / "weights");
  EXPECT_EQ(file.filename(), "model.h5");
  if (rank() == 0) {
    const checkpoint::H5File f = checkpoint::H5File::open_read_only(file);
    const std::vector<std::string> names = f.root().child_names();
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
              (std::set<std::string>{"embed.weight", "hidden.weight", "hidden.bias", "head.weight"}));
  }
  torch::manual_seed(9);
  TiedRun second(comm_, "adamw");
  EXPECT_FALSE(same_bits(all_values(second.net), all_values(first.net)));
  second.model.load_model(file);
  EXPECT_TRUE(same_bits(all_values(second.net), all_values(first.net)));
  comm_.barrier();
}

}  // namespace
}  // namespace mpitrain::libtorch
