// LossScaler: PyTorch GradScaler semantics (checked against update sequences generated from
// torch's update rule by golden/make_golden.py) and DeepSpeed's hysteresis, minimum scale and
// static mode.

#include "mpitrain/precision/loss_scaler.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "golden_data.hpp"
#include "test_bits.hpp"

namespace mpitrain {
namespace {

LossScalerOptions options(std::int64_t growth_interval, std::int64_t hysteresis = 1) {
  LossScalerOptions o;
  o.growth_interval = growth_interval;
  o.hysteresis = hysteresis;
  return o;
}

TEST(LossScaler, DefaultsAreTorchGradScalers) {
  const LossScalerOptions o;
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_EQ(o.hysteresis, 1);
  const LossScaler scaler;
  EXPECT_TRUE(scaler.enabled());
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(LossScaler, GrowsAfterGrowthIntervalCleanSteps) {
  LossScaler scaler(options(3));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 131072.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 262144.0f);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(LossScaler, BacksOffAndSkipsOnOverflow) {
  LossScaler scaler(options(3));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 16384.0f);
  EXPECT_EQ(scaler.skipped_steps(), 2);
}

TEST(LossScaler, OverflowResetsTheGrowthTracker) {
  LossScaler scaler(options(3));
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(true);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 32768.0f);  // a whole new interval is needed
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 65536.0f);
}

TEST(LossScaler, GrowthStopsBeforeFloat32Overflow) {
  LossScalerOptions o = options(1);
  o.init_scale = 0x1p126;
  LossScaler scaler(o);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 0x1p127f);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 0x1p127f);  // 2^128 is inf in float32: kept, as torch does
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(LossScaler, HysteresisToleratesConsecutiveOverflows) {
  LossScaler scaler(options(100, 3));
  EXPECT_EQ(scaler.hysteresis_left(), 3);
  EXPECT_TRUE(scaler.update(true));  // tolerated, still skipped
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  EXPECT_TRUE(scaler.update(true));  // third consecutive overflow: back off
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  EXPECT_TRUE(scaler.update(true));  // budget used up: every further overflow backs off
  EXPECT_EQ(scaler.scale(), 16384.0f);
  EXPECT_EQ(scaler.skipped_steps(), 4);
  EXPECT_FALSE(scaler.update(false));  // a clean step refills the budget
  EXPECT_EQ(scaler.hysteresis_left(), 3);
  scaler.update(true);
  scaler.update(false);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 16384.0f);  // never two in a row: never backs off
  EXPECT_EQ(scaler.hysteresis_left(), 2);
}

TEST(LossScaler, NonConsecutiveHysteresisRefillsOnlyWhenTheScaleGrows) {
  LossScalerOptions o = options(3, 2);
  o.consecutive_hysteresis = false;  // DeepSpeed's default
  LossScaler scaler(o);
  scaler.update(true);  // tolerated
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  scaler.update(false);
  EXPECT_EQ(scaler.hysteresis_left(), 1);  // not refilled by a clean step
  scaler.update(true);  // backs off although the overflows were not consecutive
  EXPECT_EQ(scaler.scale(), 32768.0f);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.hysteresis_left(), 2);  // refilled by the growth
}

TEST(LossScaler, ThrowsWhenOverflowingAtTheMinimumScale) {
  LossScalerOptions o = options(1000);
  o.init_scale = 4.0;
  o.min_scale = 1.0;
  LossScaler scaler(o);
  scaler.update(true, 10);
  scaler.update(true, 11);
  EXPECT_EQ(scaler.scale(), 1.0f);  // reached the minimum
  EXPECT_FALSE(scaler.update(false, 12));
  const LossScaler::State before = scaler.state();
  try {
    scaler.update(true, 13);
    FAIL() << "an overflow at the minimum scale must throw";
  } catch (const MinLossScaleError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("minimum"), std::string::npos) << message;
    EXPECT_NE(message.find("min_scale = 1"), std::string::npos) << message;
    EXPECT_NE(message.find("still overflow"), std::string::npos) << message;
    EXPECT_NE(message.find("step 13"), std::string::npos) << message;
  }
  EXPECT_EQ(scaler.state(), before);  // unchanged by the failed update
  try {
    scaler.update(true);
    FAIL() << "an overflow at the minimum scale must throw";
  } catch (const MinLossScaleError& e) {
    // Without a step number the message counts this scaler's updates (3 done, 4th failed).
    EXPECT_NE(std::string(e.what()).find("update 4 of this loss scaler"), std::string::npos) << e.what();
  }
}

TEST(LossScaler, BackoffIsClampedToTheMinimumFirst) {
  LossScalerOptions o = options(1000);
  o.init_scale = 3.0;
  o.min_scale = 2.0;
  LossScaler scaler(o);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 2.0f);  // 1.5 would be below the minimum
  EXPECT_THROW(scaler.update(true), MinLossScaleError);
}

TEST(LossScaler, ThrowsOnceTheScaleHasUnderflowedToZero) {
  LossScalerOptions o = options(1000);
  o.init_scale = 1.0;  // min_scale 0: no minimum, as in torch
  LossScaler scaler(o);
  for (int i = 0; i < 150; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), 0.0f);
  EXPECT_THROW(scaler.update(true), MinLossScaleError);
}

TEST(LossScaler, StaticModeKeepsTheScaleAndStillSkips) {
  LossScalerOptions o = options(2);
  o.dynamic = false;
  o.init_scale = 1024.0;
  LossScaler scaler(o);
  EXPECT_FALSE(scaler.dynamic());
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  LossScaler resumed(o);
  resumed.load_state({65536.0, 1, 1, 7});  // the configured static scale wins
  EXPECT_EQ(resumed.scale(), 1024.0f);
  EXPECT_EQ(resumed.skipped_steps(), 7);
}

TEST(LossScaler, DisabledScalerIsTransparent) {
  LossScalerOptions o;
  o.enabled = false;
  LossScaler scaler(o);
  EXPECT_FALSE(scaler.enabled());
  EXPECT_EQ(scaler.scale(), 1.0f);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(LossScaler, StateRoundTripContinuesIdentically) {
  LossScaler a(options(4, 2));
  const bool pattern[] = {false, true, false, false, true, true, false, false, false};
  for (bool inf : pattern) a.update(inf);
  const LossScaler::State saved = a.state();
  EXPECT_EQ(saved.scale, static_cast<double>(a.scale()));
  EXPECT_EQ(saved.growth_tracker, a.growth_tracker());
  EXPECT_EQ(saved.hysteresis, a.hysteresis_left());
  EXPECT_EQ(saved.skipped_steps, 3);

  LossScaler b(options(4, 2));
  b.load_state(saved);
  EXPECT_EQ(b.state(), saved);
  for (int i = 0; i < 40; ++i) {
    const bool inf = i % 7 == 3 || i % 11 == 0;
    ASSERT_EQ(a.update(inf), b.update(inf));
    ASSERT_EQ(a.state(), b.state()) << "diverged at update " << i;
  }
}

TEST(LossScaler, LoadStateRejectsInvalidStatesAndCapsHysteresis) {
  LossScaler scaler(options(4, 2));
  EXPECT_THROW(scaler.load_state({0.0, 0, 1, 0}), std::invalid_argument);
  EXPECT_THROW(scaler.load_state({-2.0, 0, 1, 0}), std::invalid_argument);
  EXPECT_THROW(scaler.load_state({1e39, 0, 1, 0}), std::invalid_argument);  // inf in float32
  EXPECT_THROW(scaler.load_state({2.0, -1, 1, 0}), std::invalid_argument);
  EXPECT_THROW(scaler.load_state({2.0, 0, 0, 0}), std::invalid_argument);
  EXPECT_THROW(scaler.load_state({2.0, 0, 1, -1}), std::invalid_argument);
  scaler.load_state({2.0, 1, 5, 3});
  EXPECT_EQ(scaler.hysteresis_left(), 2);  // configured budget is 2
  EXPECT_EQ(scaler.scale(), 2.0f);
}

TEST(LossScaler, RejectsInvalidOptionsNamingThem) {
  const auto message_for = [](const LossScalerOptions& o) -> std::string {
    try {
      LossScaler scaler(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  LossScalerOptions o;
  o.growth_factor = 1.0;
  EXPECT_NE(message_for(o).find("growth_factor"), std::string::npos);
  o = {};
  o.backoff_factor = 1.0;
  EXPECT_NE(message_for(o).find("backoff_factor"), std::string::npos);
  o = {};
  o.growth_interval = 0;
  EXPECT_NE(message_for(o).find("growth_interval"), std::string::npos);
  o = {};
  o.hysteresis = 0;
  EXPECT_NE(message_for(o).find("hysteresis"), std::string::npos);
  o = {};
  o.init_scale = 1e40;
  EXPECT_NE(message_for(o).find("init_scale"), std::string::npos);
  o = {};
  o.min_scale = 1e6;
  EXPECT_NE(message_for(o).find("min_scale"), std::string::npos);
}

// One update sequence from golden/loss_scaler_sequences.txt.
struct Sequence {
  std::string name;
  LossScalerOptions options;
  struct Step {
    bool found_inf;
    std::uint32_t scale_bits;
    std::int64_t growth_tracker;
    std::int64_t hysteresis_left;
  };
  std::vector<Step> steps;
};

std::vector<Sequence> read_sequences() {
  const std::string path = test::golden_path("loss_scaler_sequences.txt");
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::vector<Sequence> sequences;
  std::string line;
  std::size_t remaining = 0;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    if (remaining == 0) {
      std::string keyword;
      Sequence s;
      fields >> keyword >> s.name >> s.options.init_scale >> s.options.growth_factor >>
          s.options.backoff_factor >> s.options.growth_interval >> s.options.hysteresis >> remaining;
      if (!fields || keyword != "sequence") throw std::runtime_error("bad header in " + path + ": " + line);
      sequences.push_back(s);
      continue;
    }
    Sequence::Step step{};
    int found_inf = 0;
    fields >> found_inf >> std::hex >> step.scale_bits >> std::dec >> step.growth_tracker >> step.hysteresis_left;
    if (!fields) throw std::runtime_error("bad step in " + path + ": " + line);
    step.found_inf = found_inf != 0;
    sequences.back().steps.push_back(step);
    --remaining;
  }
  return sequences;
}

TEST(LossScaler, MatchesTorchUpdateRuleSequences) {
  const std::vector<Sequence> sequences = read_sequences();
  ASSERT_EQ(sequences.size(), 5u);
  for (const Sequence& s : sequences) {
    SCOPED_TRACE(s.name);
    ASSERT_FALSE(s.steps.empty());
    LossScaler scaler(s.options);
    std::int64_t skipped = 0;
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      const auto& step = s.steps[i];
      ASSERT_EQ(scaler.update(step.found_inf), step.found_inf) << "update " << i;
      skipped += step.found_inf ? 1 : 0;
      ASSERT_EQ(test::bits_of(scaler.scale()), step.scale_bits) << "update " << i;
      ASSERT_EQ(scaler.growth_tracker(), step.growth_tracker) << "update " << i;
      ASSERT_EQ(scaler.hysteresis_left(), step.hysteresis_left) << "update " << i;
      ASSERT_EQ(scaler.skipped_steps(), skipped) << "update " << i;
    }
  }
}

}  // namespace
}  // namespace mpitrain
