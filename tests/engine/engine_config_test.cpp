// EngineConfig: validation names the offending key, MiB convert to bytes, policy names parse.

#include "mpitrain/engine/engine_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace mpitrain {
namespace {

// Returns the message validate() throws, or "" when it accepts the config.
std::string error_of(const EngineConfig& config) {
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(EngineConfigTest, DefaultsAreValidAndMatchTheTrainerDefaults) {
  const EngineConfig config;
  EXPECT_EQ(error_of(config), "");
  EXPECT_EQ(config.gradient_accumulation_steps, 1u);
  EXPECT_TRUE(config.sync_with_dataloader);
  EXPECT_EQ(config.bucket_cap_bytes(), 25u << 20);
  EXPECT_EQ(config.first_bucket_bytes(), 1u << 20);
  EXPECT_TRUE(config.overlap);
  EXPECT_EQ(config.grad_comm_dtype, DType::f32);
  EXPECT_EQ(config.mixed_precision, Precision::fp32);
  EXPECT_EQ(config.nan_policy, NanPolicy::error);
  EXPECT_FALSE(config.split_batches);
  EXPECT_TRUE(config.even_batches);
}

TEST(EngineConfigTest, InvalidValuesNameTheirKey) {
  EngineConfig c;
  c.gradient_accumulation_steps = 0;
  EXPECT_NE(error_of(c).find("training.gradient_accumulation_steps = 0"), std::string::npos) << error_of(c);

  c = EngineConfig{};
  c.bucket_cap_mb = -1.0;
  EXPECT_NE(error_of(c).find("distributed.bucket_cap_mb = -1"), std::string::npos) << error_of(c);
  c.bucket_cap_mb = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(error_of(c).find("distributed.bucket_cap_mb"), std::string::npos);
  EXPECT_THROW(c.bucket_cap_bytes(), std::invalid_argument);

  c = EngineConfig{};
  c.first_bucket_mb = 0.0;
  EXPECT_NE(error_of(c).find("distributed.first_bucket_mb = 0"), std::string::npos) << error_of(c);

  c = EngineConfig{};
  c.grad_comm_dtype = DType::i32;
  EXPECT_NE(error_of(c).find("distributed.grad_comm_dtype = i32"), std::string::npos) << error_of(c);
  c.grad_comm_dtype = DType::bf16;
  EXPECT_EQ(error_of(c), "");

  c = EngineConfig{};
  c.project.total_limit = 0;
  EXPECT_NE(error_of(c).find("project.total_limit = 0"), std::string::npos) << error_of(c);
  c.project.total_limit = 1;
  c.project.iteration = -3;
  EXPECT_NE(error_of(c).find("project.iteration = -3"), std::string::npos) << error_of(c);
  c.project.iteration.reset();
  c.project.project_dir.clear();
  EXPECT_NE(error_of(c).find("project.dir"), std::string::npos) << error_of(c);

  c = EngineConfig{};
  c.timeout_s = -1.0;
  EXPECT_EQ(error_of(c), "EngineConfig: distributed.timeout_s = -1 is invalid: must be a finite "
                         "number of seconds >= 0");
  c.timeout_s = 0.0;
  EXPECT_EQ(error_of(c), "");
}

TEST(EngineConfigTest, MebibytesBecomeBytes) {
  EngineConfig c;
  c.bucket_cap_mb = 0.5;
  c.first_bucket_mb = 1e-9;  // rounds below one element: clamped to 4 bytes
  EXPECT_EQ(c.bucket_cap_bytes(), 524288u);
  EXPECT_EQ(c.first_bucket_bytes(), 4u);
}

TEST(EngineConfigTest, PolicyNamesRoundTrip) {
  for (auto p : {UnusedParameterPolicy::zero, UnusedParameterPolicy::error}) {
    EXPECT_EQ(parse_unused_parameter_policy(to_string(p)), p);
  }
  for (auto p : {NanPolicy::error, NanPolicy::skip}) EXPECT_EQ(parse_nan_policy(to_string(p)), p);
  EXPECT_THROW(parse_nan_policy("ignore"), std::invalid_argument);
  EXPECT_THROW(parse_unused_parameter_policy("find"), std::invalid_argument);
}

}  // namespace
}  // namespace mpitrain
