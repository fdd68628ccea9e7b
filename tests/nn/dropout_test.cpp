// Dropout: identity in eval (torch parity), inverted scaling and mask reuse in training,
// seeded reproducible streams, finite differences.
#include "mpitrain/nn/dropout.hpp"

#include <gtest/gtest.h>

#include "activations_common.hpp"

namespace mpitrain::nn {
namespace {

TEST(Dropout, EvalModeIsTheIdentityLikeTorch) {
  Dropout drop(0.3f, 1);
  drop.train(false);
  testing::expect_layer_matches_torch(drop, "dropout_eval", 0.0);
}

TEST(Dropout, TrainingKeepsWithProbabilityOneMinusPAndScales) {
  const float p = 0.25f;
  Dropout drop(p, 7, 3);
  Tensor x({200, 100});
  x.fill(2.0f);
  const Tensor y = drop.forward(x);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < y.numel(); ++i) {
    if (y[i] != 0.0f) {
      EXPECT_EQ(y[i], 2.0f * static_cast<float>(1.0 / (1.0 - p)));
      ++kept;
    }
  }
  // 20000 Bernoulli(0.75) draws: standard deviation 61; allow 5 of them.
  EXPECT_NEAR(static_cast<double>(kept), 15000.0, 305.0);
  Tensor g({200, 100});
  g.fill(1.0f);
  const Tensor dx = drop.backward(g);
  for (std::size_t i = 0; i < y.numel(); ++i) EXPECT_EQ(dx[i], y[i] / 2.0f);
}

TEST(Dropout, StreamsAreSeededAndRestorable) {
  Tensor x({10, 10});
  x.fill(1.0f);
  Dropout a(0.5f, 11, 0), b(0.5f, 11, 0), c(0.5f, 11, 1);
  const Tensor ya = a.forward(x);
  const Tensor yb = b.forward(x);
  const Tensor yc = c.forward(x);
  testing::expect_close(yb, ya, 0.0, "same seed and stream give the same mask");
  std::size_t differ = 0;
  for (std::size_t i = 0; i < x.numel(); ++i) differ += ya[i] != yc[i];
  EXPECT_GT(differ, 20u);

  const StateDict saved = a.rng().state_dict();
  const Tensor next = a.forward(x);
  Dropout restored(0.5f);
  restored.rng().load_state_dict(saved);
  testing::expect_close(restored.forward(x), next, 0.0, "restored stream replays the mask");
}

TEST(Dropout, ZeroAndOneProbabilities) {
  Tensor x({3, 4});
  x.fill(1.5f);
  Dropout none(0.0f);
  testing::expect_close(none.forward(x), x, 0.0, "p = 0 is the identity");
  Dropout all(1.0f);
  const Tensor y = all.forward(x);
  for (std::size_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y[i], 0.0f);
  EXPECT_THROW(Dropout(1.5f), std::invalid_argument);
  EXPECT_THROW(Dropout(-0.1f), std::invalid_argument);
}

// Linear in x for a fixed mask (replayed before every forward): exact up to rounding.
TEST(Dropout, GradientMatchesFiniteDifferencesForAFixedMask) {
  Rng rng(24);
  Dropout drop(0.4f, 5);
  const Rng start = drop.rng();
  testing::check_gradients(drop, testing::random_tensor({4, 6}, rng), 1e-2f, 1e-3,
                           [&] { drop.set_rng(start); });
}

}  // namespace
}  // namespace mpitrain::nn
