// Mixed precision in the Engine (issue 5): skipped steps when one rank overflows (and
// optimizer_step_was_skipped), nan_policy for bf16 and fp32 (the error names the step and the
// first parameter whose gradient is not finite), unscaling exactly once per step under
// gradient accumulation and clipping, 16-bit gradient communication against fp32, and where
// the 1 / world_size division sits so that fp16 on the wire does not overflow.
//
// Overflows are injected on ONE rank (the last), before synchronisation, as a real overflow
// arises: every rank must learn of it from the synchronised gradients alone.

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
#include "mpitrain/nn/linear.hpp"
#include "mpitrain/nn/lr_scheduler.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/sgd.hpp"
#include "mpitrain/precision/float16.hpp"

namespace mpitrain {
namespace {

using testing::flatten;
using testing::flatten_grads;
using testing::identical_on_all_ranks;
using testing::same_bits;
using testing::same_state;
using testing::worst_relative_error;

constexpr std::size_t kFeatures = 8;
constexpr std::size_t kClasses = 4;
const std::vector<std::size_t> kHidden = {16, 12};
constexpr float kInf = std::numeric_limits<float>::infinity();

std::shared_ptr<const data::Dataset> synthetic(std::size_t size) {
  data::SyntheticOptions o;
  o.size = size;
  o.feature_dim = kFeatures;
  o.num_classes = kClasses;
  o.seed = 11;
  o.noise_std = 0.8f;
  return std::make_shared<data::SyntheticDataset>(o);
}

nn::Sequential mlp() { return nn::make_mlp(kFeatures, kHidden, kClasses, nn::Activation::relu, 0.0f, 7); }

data::DataLoaderOptions loader_options(std::size_t batch) {
  data::DataLoaderOptions o;
  o.batch_size = batch;
  o.shuffle = true;
  o.seed = 5;
  return o;
}






class MixedPrecisionTest : public ::testing::Test {
 protected:
  MpiRuntime runtime_;
  Communicator comm_{runtime_};
  std::size_t n() const { return static_cast<std::size_t>(comm_.size()); }
  // The rank that injects overflows: the last one (rank 0 in a world of one).
  bool injects() const { return comm_.rank() + 1 == comm_.size(); }
  // Returns the same value from every rank (each rank checks its own, too).
  template <class T> bool agreed(T value) const {
    return comm_.allreduce_value(value, ReduceOp::max) == comm_.allreduce_value(value, ReduceOp::min);
  }
};

// ---- a step with inf/NaN gradients on one rank is skipped on every rank ----------------------

enum class Injection {
  inf,          // +inf in one element of the loss gradient
  nan,          // NaN in one element of the loss gradient
  fp16_range,   // the whole loss gradient times 1e6: finite in fp32, beyond fp16's 65504
};

struct SkipCase {
  Precision precision;
  NanPolicy policy;
  Injection injection;
};

std::string name_of(const SkipCase& c) {
  const char* inj = c.injection == Injection::inf ? "inf" : c.injection == Injection::nan ? "nan" : "fp16_range";
  return std::string(c.precision == Precision::fp32 ? "fp32" : to_string(c.precision)) + "_" +
         std::string(to_string(c.policy)) + "_" + inj;
}

class SkippedStep : public MixedPrecisionTest, public ::testing::WithParamInterface<SkipCase> {};

TEST_P(SkippedStep, OneRanksOverflowSkipsTheStepEverywhereAndChangesNothing) {
  const SkipCase c = GetParam();
  constexpr std::size_t kBadStep = 3;
  constexpr std::size_t kSteps = 6;
  const std::size_t batch = 4;
  auto ds = synthetic(kSteps * n() * batch);

  EngineConfig config;
  config.mixed_precision = c.precision;
  config.nan_policy = c.policy;
  config.first_bucket_mb = 1e-4;  // several buckets: the overflow lies in some of them only
  config.bucket_cap_mb = 4e-4;
  // 2^10, well below torch's initial 2^16, leaves this model's clean steps far from fp16's
  // range at any world size, so the injected step is the only one that skips.
  config.loss_scaler.init_scale = 1024.0;
  nn::Sequential model = mlp();
  nn::AdamW opt(model.parameters(), nn::AdamWOptions{});
  nn::LrScheduler scheduler(opt, nn::LrScheduleKind::linear, 0, 20);
  data::DataLoader loader(ds, loader_options(batch));
  Engine engine(config, comm_);
  engine.prepare(model, opt, loader, &scheduler);
  ASSERT_GE(engine.gradient_sync()->buckets().size(), 3u);
  const bool fp16 = c.precision == Precision::fp16;
  ASSERT_EQ(engine.loss_scaler() != nullptr, fp16) << "bf16 and fp32 need no loss scaler";

  data::Batch b;
  Tensor grad;
  for (std::size_t s = 0; s < kSteps; ++s) {
    ASSERT_TRUE(engine.next_batch(b));
    nn::cross_entropy(model.forward(b.features), b.labels, grad);
    if (s == kBadStep && injects()) {
      switch (c.injection) {
        case Injection::inf: grad[1] = kInf; break;
        case Injection::nan: grad[1] = std::numeric_limits<float>::quiet_NaN(); break;
        case Injection::fp16_range:
          for (float& v : grad.span()) v *= 1e6f;
          break;
      }
    }
    engine.backward(grad);

    const std::vector<float> params_before = flatten(model.parameters());
    const StateDict opt_before = opt.state_dict();
    const std::int64_t scheduler_before = scheduler.last_step();
    const double lr_before = opt.lr();
    const float scale_before = engine.loss_scale();
    const bool updated = engine.step();
    engine.zero_grad();

    EXPECT_EQ(engine.step_count(), s + 1) << "a skipped step still counts";
    EXPECT_EQ(engine.optimizer_step_was_skipped(), s == kBadStep) << "step " << s;
    EXPECT_TRUE(agreed(static_cast<int>(updated))) << "step " << s;
    if (s != kBadStep) {
      EXPECT_TRUE(updated) << "step " << s;
      EXPECT_FALSE(same_bits(flatten(model.parameters()), params_before)) << "step " << s;
      EXPECT_EQ(scheduler.last_step(), scheduler_before + 1) << "step " << s;
      EXPECT_EQ(engine.loss_scale(), scale_before) << "step " << s;
      continue;
    }
    EXPECT_FALSE(updated);
    EXPECT_TRUE(same_bits(flatten(model.parameters()), params_before))
        << "a skipped step must leave the parameters bitwise unchanged";
    EXPECT_TRUE(same_state(opt.state_dict(), opt_before))
        << "a skipped step must leave the optimizer state (moments and step counts) unchanged";
    EXPECT_EQ(scheduler.last_step(), scheduler_before);
    EXPECT_EQ(opt.lr(), lr_before);
    EXPECT_EQ(engine.state().skipped_steps, 1u);
    if (fp16) {
      EXPECT_EQ(engine.loss_scale(), scale_before / 2.0f);
      // What a checkpoint stores under /scaler.
      const LossScaler::State st = engine.loss_scaler()->state();
      EXPECT_EQ(st.scale, 512.0);
      EXPECT_EQ(st.growth_tracker, 0);
      EXPECT_EQ(st.hysteresis, 1);
      EXPECT_EQ(st.skipped_steps, 1);
    } else {
      EXPECT_EQ(engine.loss_scale(), 1.0f);
    }
  }
  EXPECT_EQ(engine.state().skipped_steps, 1u);
  EXPECT_TRUE(agreed(static_cast<std::int64_t>(engine.state().skipped_steps)));
  EXPECT_EQ(scheduler.last_step(), static_cast<std::int64_t>(kSteps - 1));
  const StateDict final_state = opt.state_dict();
  EXPECT_EQ(final_state.scalars.at("0.weight/step"), static_cast<double>(kSteps - 1))
      << "the optimizer's step count does not advance on a skipped step";
  EXPECT_TRUE(identical_on_all_ranks(comm_, flatten(model.parameters())));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SkippedStep,
    ::testing::Values(SkipCase{Precision::fp16, NanPolicy::error, Injection::inf},
                      SkipCase{Precision::fp16, NanPolicy::skip, Injection::fp16_range},
                      SkipCase{Precision::bf16, NanPolicy::skip, Injection::inf},
                      SkipCase{Precision::bf16, NanPolicy::skip, Injection::nan},
                      SkipCase{Precision::fp32, NanPolicy::skip, Injection::inf},
                      SkipCase{Precision::fp32, NanPolicy::skip, Injection::nan}),
    [](const auto& info) { return name_of(info.param); });

// ---- nan_policy error ----------------------------------------------------------------------------

class NanPolicyError : public MixedPrecisionTest, public ::testing::WithParamInterface<Precision> {};

TEST_P(NanPolicyError, OneRanksInfStopsEveryRankNamingTheStepAndParameter) {
  constexpr std::size_t kBadStep = 2;
  const std::size_t batch = 4;
  auto ds = synthetic(4 * n() * batch);
  EngineConfig config;
  config.mixed_precision = GetParam();
  config.nan_policy = NanPolicy::error;
  nn::Sequential model = mlp();
  nn::AdamW opt(model.parameters(), nn::AdamWOptions{});
  data::DataLoader loader(ds, loader_options(batch));
  Engine engine(config, comm_);
  engine.prepare(model, opt, loader);
  data::Batch b;
  Tensor grad;
  for (std::size_t s = 0; s < kBadStep; ++s) {
    ASSERT_TRUE(engine.next_batch(b));
    nn::cross_entropy(model.forward(b.features), b.labels, grad);
    engine.backward(grad);
    ASSERT_TRUE(engine.step());
    engine.zero_grad();
  }
  ASSERT_TRUE(engine.next_batch(b));
  nn::cross_entropy(model.forward(b.features), b.labels, grad);
  if (injects()) grad[0] = kInf;
  engine.backward(grad);
  const std::vector<float> params_before = flatten(model.parameters());
  std::string message;
  try {
    engine.step();
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "nan_policy error must throw on every rank";
  EXPECT_NE(message.find("step " + std::to_string(kBadStep)), std::string::npos) << message;
  EXPECT_NE(message.find("rank " + std::to_string(comm_.rank())), std::string::npos) << message;
  // The inf spreads to every gradient through backward; the first in registration order:
  EXPECT_NE(message.find("'0.weight'"), std::string::npos) << message;
  EXPECT_TRUE(engine.optimizer_step_was_skipped());
  EXPECT_TRUE(same_bits(flatten(model.parameters()), params_before));
}

INSTANTIATE_TEST_SUITE_P(Precisions, NanPolicyError, ::testing::Values(Precision::fp32, Precision::bf16),
                         [](const auto& info) {
                           return info.param == Precision::fp32 ? std::string("fp32")
                                                                : std::string(to_string(info.param));
                         });

// Bring-your-own parameters "a", "b", "c" (registration order); the buckets hold them in
// reverse order, so a check that walks the buckets meets "c" first.
TEST_F(MixedPrecisionTest, NanPolicyErrorNamesTheStepAndTheFirstNonFiniteParameter) {
  EngineConfig config;
  config.nan_policy = NanPolicy::error;
  config.first_bucket_mb = 1e-6;  // one parameter per bucket
  config.bucket_cap_mb = 1e-6;
  std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 1.0f);
  Engine engine(config, comm_);
  engine.register_parameters({{"a", {4}, a, {}}, {"b", {4}, b, {}}, {"c", {4}, c, {}}});
  ASSERT_EQ(engine.gradient_sync()->buckets().size(), 3u);
  auto backward = [&](bool poison) {
    engine.backward([&] {
      const float s = engine.loss_gradient_scale();
      for (const char* name : {"c", "b", "a"}) {
        std::span<float> g = engine.gradient(name);
        std::fill(g.begin(), g.end(), s);
        if (poison && injects() && name[0] != 'a') g[2] = kInf;
        engine.grad_ready(name);
      }
    });
  };
  backward(false);
  ASSERT_TRUE(engine.step());
  engine.zero_grad();
  backward(true);
  std::string message;
  try {
    engine.step();
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("step 1"), std::string::npos) << message;
  EXPECT_NE(message.find("'b'"), std::string::npos) << message;
  EXPECT_EQ(message.find("'c'"), std::string::npos) << message;
}

// A disabled fp16 loss scaler (loss_scaler.enabled = false) leaves inf/NaN to nan_policy.
TEST_F(MixedPrecisionTest, DisabledLossScalerFallsBackToNanPolicy) {
  for (NanPolicy policy : {NanPolicy::skip, NanPolicy::error}) {
    EngineConfig config;
    config.mixed_precision = Precision::fp16;
    config.loss_scaler.enabled = false;
    config.nan_policy = policy;
    std::vector<float> a(4, 1.0f);
    Engine engine(config, comm_);
    engine.register_parameters({{"a", {4}, a, {}}});
    EXPECT_EQ(engine.loss_scale(), 1.0f);
    engine.backward([&] {
      std::span<float> g = engine.gradient("a");
      std::fill(g.begin(), g.end(), injects() ? kInf : 1.0f);
      engine.grad_ready("a");
    });
    if (policy == NanPolicy::skip) {
      EXPECT_FALSE(engine.step());
      EXPECT_TRUE(engine.optimizer_step_was_skipped());
      EXPECT_EQ(engine.state().skipped_steps, 1u);
    } else {
      EXPECT_THROW(engine.step(), std::runtime_error);
    }
  }
}

// ---- unscaling exactly once per optimizer step ------------------------------------------------

enum class AfterBackward { step_only, clip_norm_inactive, clip_norm_active, clip_value };

class UnscaleOnce : public MixedPrecisionTest, public ::testing::WithParamInterface<AfterBackward> {};

// Two micro-steps: rank r adds (r + 1) * {1, 3} to "a" (5 values) and (r + 1) to "b" (3
// values), each times loss_gradient_scale() = 2^16 / (2 n). Unscaled once, the mean over
// micro-steps and ranks is a = 2 m, b = m with m = (n + 1) / 2: exact in fp32.
TEST_P(UnscaleOnce, GradientsAreUnscaledOnceWhateverRanBeforeStep) {
  const AfterBackward what = GetParam();
  EngineConfig config;
  config.mixed_precision = Precision::fp16;
  config.gradient_accumulation_steps = 2;
  std::vector<float> a(5, 0.0f), ga(5, 0.0f), b(3, 0.0f), gb(3, 0.0f);
  Engine engine(config, comm_);
  engine.register_parameters({{"a", {5}, a, ga}, {"b", {3}, b, gb}});
  const float r1 = static_cast<float>(comm_.rank()) + 1.0f;
  auto micro = [&](float value) {
    engine.backward([&] {
      const float s = engine.loss_gradient_scale();
      for (float& v : ga) v += value * r1 * s;
      for (float& v : gb) v += r1 * s;
      engine.grad_ready("b");
      engine.grad_ready("a");
    });
  };
  micro(1.0f);
  // Not a synchronising micro-step: no unscale, no check, no step, nothing touched.
  const std::vector<float> ga_before = ga;
  EXPECT_TRUE(std::isnan(engine.clip_grad_norm(1e-3)));
  engine.clip_grad_value(1e-3);
  EXPECT_FALSE(engine.step());
  EXPECT_FALSE(engine.optimizer_step_was_skipped()) << "no optimizer step happened yet";
  EXPECT_TRUE(same_bits(ga, ga_before)) << "a non-synchronising micro-step was unscaled or clipped";
  EXPECT_EQ(engine.step_count(), 0u);
  micro(3.0f);

  const double m = (static_cast<double>(n()) + 1.0) / 2.0;
  const double norm = m * std::sqrt(5.0 * 4.0 + 3.0);  // |(2m x5, m x3)|
  double coef = 1.0;
  switch (what) {
    case AfterBackward::step_only: break;
    case AfterBackward::clip_norm_inactive:
      EXPECT_NEAR(engine.clip_grad_norm(1e6), norm, 1e-6 * norm);
      EXPECT_NEAR(engine.clip_grad_norm(1e6), norm, 1e-6 * norm) << "a second call unscaled again";
      break;
    case AfterBackward::clip_norm_active:
      EXPECT_NEAR(engine.clip_grad_norm(norm / 4.0), norm, 1e-6 * norm) << "the unscaled norm";
      coef = (norm / 4.0) / (norm + 1e-6);
      break;
    case AfterBackward::clip_value:
      engine.clip_grad_value(1.0);  // m >= 1: every value becomes 1
      break;
  }
  EXPECT_TRUE(engine.step());
  EXPECT_FALSE(engine.optimizer_step_was_skipped());
  const float want_a = what == AfterBackward::clip_value ? 1.0f : static_cast<float>(2.0 * m * coef);
  const float want_b = what == AfterBackward::clip_value ? 1.0f : static_cast<float>(m * coef);
  const float tol_a = what == AfterBackward::clip_norm_active ? 1e-6f * want_a : 0.0f;
  const float tol_b = what == AfterBackward::clip_norm_active ? 1e-6f * want_b : 0.0f;
  for (float v : ga) EXPECT_NEAR(v, want_a, tol_a);
  for (float v : gb) EXPECT_NEAR(v, want_b, tol_b);
  EXPECT_EQ(engine.state().skipped_steps, 0u);
  EXPECT_EQ(engine.loss_scale(), 65536.0f);
}

INSTANTIATE_TEST_SUITE_P(Cases, UnscaleOnce,
                         ::testing::Values(AfterBackward::step_only, AfterBackward::clip_norm_inactive,
                                           AfterBackward::clip_norm_active, AfterBackward::clip_value),
                         [](const auto& info) {
                           switch (info.param) {
                             case AfterBackward::step_only: return "step_only";
                             case AfterBackward::clip_norm_inactive: return "clip_norm_inactive";
                             case AfterBackward::clip_norm_active: return "clip_norm_active";
                             case AfterBackward::clip_value: return "clip_value";
                           }
                           return "unknown";
                         });

// ---- fp16 with accumulation and clipping equals the run without accumulation --------------------

struct ClippedRun {
  std::vector<double> norms;  // clip_grad_norm's result per optimizer step
  std::size_t clipped = 0;    // steps whose norm exceeded max_norm
  std::uint64_t skipped = 0;
};

// Trains the MLP in fp16 with SGD (lr 0.1, momentum 0.9) for `steps` optimizer steps of
// `accumulation` micro-batches of `micro_batch` examples per rank, clipping every step to
// `max_norm` before step().
ClippedRun train_clipped(const Communicator& comm, nn::Sequential& model, std::size_t accumulation,
                         std::size_t micro_batch, std::size_t steps, double max_norm,
                         std::shared_ptr<const data::Dataset> ds) {
  EngineConfig config;
  config.mixed_precision = Precision::fp16;
  config.gradient_accumulation_steps = accumulation;
  // 2^10 rather than torch's 2^16: neither run may overflow, or the two would skip different
  // steps (a micro-batch's gradient is not the whole batch's); both assert no skip.
  config.loss_scaler.init_scale = 1024.0;
  nn::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  nn::Sgd opt(model.parameters(), so);
  data::DataLoader loader(std::move(ds), loader_options(micro_batch));
  Engine engine(config, comm);
  engine.prepare(model, opt, loader);
  EXPECT_EQ(engine.loss_scale(), 1024.0f);
  ClippedRun run;
  data::Batch b;
  Tensor grad;
  while (engine.next_batch(b)) {
    auto micro = engine.accumulate();
    nn::cross_entropy(model.forward(b.features), b.labels, grad);
    engine.backward(grad);
    const double norm = engine.clip_grad_norm(max_norm);
    if (engine.sync_gradients()) {
      run.norms.push_back(norm);
      run.clipped += norm > max_norm ? 1 : 0;
    } else {
      EXPECT_TRUE(std::isnan(norm)) << "clip_grad_norm acted on a non-synchronising micro-step";
    }
    engine.step();
    engine.zero_grad();
  }
  EXPECT_EQ(engine.step_count(), steps);
  run.skipped = engine.state().skipped_steps;
  return run;
}

// The same global batches either as one micro-batch of 8 per rank, or as 4 accumulated
// micro-batches of 2 per rank (rank r's share differs, the global batch of each step is the
// same set of examples), clipped to max_norm before every step (Accelerate #641: clipping
// unscales, step() must not unscale again). SGD, not Adam: Adam's update barely depends on
// the gradient's scale, so a gradient unscaled twice (divided by 1024 once more) would go
// unnoticed. max_norm sits among the steps' norms, so both clipping and not clipping occur.
//
// Tolerance 5e-3 (max |difference| / max |parameter|, worst tensor) for the parameters and
// 2e-3 (relative) for the norms. In fp16 each micro-step's parameter gradient is rounded to
// 11 significant bits (2^-12 relative) before it is added to the fp32 accumulator, so the
// accumulated gradient carries up to 4 such roundings where the run without accumulation
// has one, and the fp32 sums run in another order; momentum 0.9 carries each step's
// difference into the following updates. Measured at 1-4 ranks: parameters <= 1.3e-3,
// norms <= 2.8e-4. Training moves the parameters by 0.85-1.7 on the same scale, so a
// missing or doubled unscale (a factor 1024 in the gradient) is far outside the tolerance.
TEST_F(MixedPrecisionTest, Fp16AccumulationWithClippingEqualsTheRunWithoutAccumulation) {
  constexpr std::size_t kSteps = 12;
  constexpr std::size_t kBatch = 8;
  constexpr std::size_t kAccumulation = 4;
  constexpr double kMaxNorm = 0.3;
  constexpr double kTolerance = 5e-3;
  auto ds = synthetic(kSteps * n() * kBatch);
  nn::Sequential initial = mlp();
  nn::Sequential whole = mlp();
  nn::Sequential accumulated = mlp();
  const ClippedRun a = train_clipped(comm_, whole, 1, kBatch, kSteps, kMaxNorm, ds);
  const ClippedRun b =
      train_clipped(comm_, accumulated, kAccumulation, kBatch / kAccumulation, kSteps, kMaxNorm, ds);
  ASSERT_EQ(a.skipped, 0u);
  ASSERT_EQ(b.skipped, 0u);
  ASSERT_EQ(a.norms.size(), kSteps);
  ASSERT_EQ(b.norms.size(), kSteps);
  EXPECT_GT(a.clipped, 0u) << "max_norm never clipped";
  EXPECT_LT(a.clipped, kSteps) << "max_norm always clipped";
  double worst_norm = 0.0;
  for (std::size_t s = 0; s < kSteps; ++s) {
    worst_norm = std::max(worst_norm, std::fabs(a.norms[s] - b.norms[s]) / a.norms[s]);
  }
  EXPECT_LE(worst_norm, 2e-3);
  const double worst = worst_relative_error(accumulated.parameters(), whole.parameters());
  EXPECT_LE(worst, kTolerance);
  EXPECT_GT(worst_relative_error(whole.parameters(), initial.parameters()), 20 * kTolerance)
      << "training hardly moved the parameters: the comparison would prove nothing";
  RecordProperty("worst_relative_parameter_error", std::to_string(worst));
  RecordProperty("worst_relative_norm_error", std::to_string(worst_norm));
}

// ---- 16-bit gradient communication ----------------------------------------------------------

// Returns the MLP after `steps` SGD steps (lr 0.1, momentum 0.9) with gradients sent as
// `wire`, in fp32 arithmetic otherwise.
void train_with_wire(const Communicator& comm, nn::Sequential& model, DType wire, std::size_t steps,
                     std::shared_ptr<const data::Dataset> ds) {
  EngineConfig config;
  config.grad_comm_dtype = wire;
  config.first_bucket_mb = 1e-4;
  config.bucket_cap_mb = 4e-4;
  nn::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  nn::Sgd opt(model.parameters(), so);
  data::DataLoader loader(std::move(ds), loader_options(4));
  Engine engine(config, comm);
  engine.prepare(model, opt, loader);
  data::Batch b;
  Tensor grad;
  while (engine.next_batch(b)) {
    nn::cross_entropy(model.forward(b.features), b.labels, grad);
    engine.backward(grad);
    engine.step();
    engine.zero_grad();
  }
  EXPECT_EQ(engine.step_count(), steps);
}

// 20 steps with bf16 and f16 on the wire against f32. Each reduced gradient carries the
// rounding of every rank's contribution and of each partial sum (8 significant bits for
// bf16, 11 for f16: unit roundoff 2^-8 and 2^-11); momentum 0.9 carries an error into the
// next ~10 updates. Tolerances (max |difference| / max |parameter|, worst tensor): bf16
// 2e-2, f16 3e-3 (the 8x between them is the 3 bits of mantissa). Measured at 2-4 ranks:
// bf16 4.3e-3 to 6.5e-3, f16 4.8e-4 to 7.6e-4, while training moves the parameters by about
// 2 on that scale. One rank sends nothing, so there the wire type changes nothing, bit for
// bit.
TEST_F(MixedPrecisionTest, SixteenBitGradientCommunicationIsCloseToFp32) {
  constexpr std::size_t kSteps = 20;
  auto ds = synthetic(kSteps * n() * 4);
  nn::Sequential initial = mlp();
  nn::Sequential f32 = mlp();
  nn::Sequential bf16 = mlp();
  nn::Sequential f16 = mlp();
  train_with_wire(comm_, f32, DType::f32, kSteps, ds);
  train_with_wire(comm_, bf16, DType::bf16, kSteps, ds);
  train_with_wire(comm_, f16, DType::f16, kSteps, ds);
  const double err_bf16 = worst_relative_error(bf16.parameters(), f32.parameters());
  const double err_f16 = worst_relative_error(f16.parameters(), f32.parameters());
  RecordProperty("bf16_worst_relative_error", std::to_string(err_bf16));
  RecordProperty("f16_worst_relative_error", std::to_string(err_f16));
  EXPECT_GT(worst_relative_error(f32.parameters(), initial.parameters()), 0.5)
      << "training hardly moved the parameters: the comparison would prove nothing";
  if (n() == 1) {
    EXPECT_EQ(err_bf16, 0.0);
    EXPECT_EQ(err_f16, 0.0);
  } else {
    EXPECT_LE(err_bf16, 2e-2);
    EXPECT_LE(err_f16, 3e-3);
    EXPECT_GT(err_bf16, 0.0) << "bf16 on the wire changed nothing: was it used?";
    EXPECT_GT(err_f16, 0.0) << "f16 on the wire changed nothing: was it used?";
  }
  EXPECT_TRUE(identical_on_all_ranks(comm_, flatten(bf16.parameters())));
  EXPECT_TRUE(identical_on_all_ranks(comm_, flatten(f16.parameters())));
}

// The 1 / world_size of the average is applied to each rank's loss gradient before
// backward (Engine::loss_gradient_scale), so every value that travels in 16 bits, each
// rank's contribution and every partial sum of the reduction, is at most the largest
// per-rank gradient in magnitude: a gradient of 61440 (fp16 max 65504) on every rank
// arrives as 61440 at any world size. Summing first and dividing afterwards would send
// partial sums of 2 x 61440 = 122880, inf in fp16, from 2 ranks on.
TEST_F(MixedPrecisionTest, Fp16OnTheWireDividesBeforeSummingSoLargeWorldsDoNotOverflow) {
  constexpr float kGradient = 61440.0f;  // 15 * 2^12: exact in fp16, and divided by 1..4
  ASSERT_TRUE(std::isinf(to_float(to_float16(2.0f * kGradient))));
  EngineConfig config;
  config.grad_comm_dtype = DType::f16;
  nn::Linear layer(1, 1, false);
  nn::SgdOptions so;
  so.lr = 0.0;
  nn::Sgd opt(layer.parameters(), so);
  Engine engine(config, comm_);
  engine.prepare(layer, opt);
  EXPECT_EQ(engine.loss_gradient_scale(), 1.0f / static_cast<float>(n()));
  Tensor x({1, 1});
  x[0] = 1.0f;
  layer.forward(x);
  Tensor g({1, 1});
  g[0] = kGradient;
  engine.backward(g);  // dW = g * x * (1 / n) on each rank, summed over the ranks
  EXPECT_EQ(layer.weight().grad[0], kGradient);
  EXPECT_TRUE(engine.step());
  EXPECT_EQ(engine.state().skipped_steps, 0u);
}

}  // namespace
}  // namespace mpitrain
