#include "mpitrain/engine/engine_config.hpp"

#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mpitrain {
namespace {

// MPI counts and our size_t bucket layout stay far from overflow below 2^40 bytes (1 TiB).
constexpr double kMaxBucketMb = 1024.0 * 1024.0;

[[noreturn]] void invalid(std::string_view key, const std::string& value, std::string_view rule) {
  throw std::invalid_argument("EngineConfig: " + std::string(key) + " = " + value + " is invalid: " +
                              std::string(rule));
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void check_mb(std::string_view key, double mb) {
  if (!std::isfinite(mb) || mb <= 0.0 || mb > kMaxBucketMb) {
    invalid(key, number(mb), "must be a finite number of MiB in (0, 1048576]");
  }
}

// Returns `v` in the shortest form that reads back as the same double.
std::string exact(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : number(v);
}

std::string boolean(bool b) { return b ? "true" : "false"; }

// Returns the trainer's spelling of a gradient wire type (fp32, bf16, fp16).
std::string wire_name(DType type) {
  switch (type) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    default: return std::string(to_string(type));
  }
}

std::size_t mb_to_bytes(double mb) {
  // At least 4 bytes, so a bucket always holds one value of any wire type.
  const double bytes = std::floor(mb * 1024.0 * 1024.0);
  return bytes < 4.0 ? 4u : static_cast<std::size_t>(bytes);
}

}  // namespace

std::string_view to_string(UnusedParameterPolicy policy) noexcept {
  switch (policy) {
    case UnusedParameterPolicy::zero: return "zero";
    case UnusedParameterPolicy::error: return "error";
  }
  return "zero";
}

UnusedParameterPolicy parse_unused_parameter_policy(std::string_view name) {
  if (name == "zero") return UnusedParameterPolicy::zero;
  if (name == "error") return UnusedParameterPolicy::error;
  throw std::invalid_argument("unknown unused-parameter policy '" + std::string(name) +
                              "' (expected zero or error)");
}

std::string_view to_string(NanPolicy policy) noexcept {
  switch (policy) {
    case NanPolicy::error: return "error";
    case NanPolicy::skip: return "skip";
  }
  return "error";
}

NanPolicy parse_nan_policy(std::string_view name) {
  if (name == "error") return NanPolicy::error;
  if (name == "skip") return NanPolicy::skip;
  throw std::invalid_argument("unknown nan_policy '" + std::string(name) +
                              "' (expected error or skip)");
}

void EngineConfig::validate() const {
  if (gradient_accumulation_steps < 1) {
    invalid("training.gradient_accumulation_steps", std::to_string(gradient_accumulation_steps),
            "must be >= 1");
  }
  check_mb("distributed.bucket_cap_mb", bucket_cap_mb);
  check_mb("distributed.first_bucket_mb", first_bucket_mb);
  if (grad_comm_dtype != DType::f32 && grad_comm_dtype != DType::bf16 &&
      grad_comm_dtype != DType::f16) {
    invalid("distributed.grad_comm_dtype", std::string(to_string(grad_comm_dtype)),
            "must be f32, bf16 or f16");
  }
  try {
    require_algorithm(Collective::allreduce, allreduce_algorithm);
  } catch (const std::invalid_argument& e) {
    invalid("distributed.allreduce_algorithm", "'" + allreduce_algorithm + "'", e.what());
  }
  if (zero_stage != 0 && zero_stage != 1) {
    invalid("distributed.zero_stage", std::to_string(zero_stage),
            "must be 0 (no sharding) or 1 (optimizer state sharded across ranks)");
  }
  if (mixed_precision != Precision::fp32 && mixed_precision != Precision::bf16 &&
      mixed_precision != Precision::fp16) {
    invalid("training.mixed_precision", std::to_string(static_cast<int>(mixed_precision)),
            "must be no, bf16 or fp16");
  }
  if (project.total_limit && *project.total_limit == 0) {
    invalid("project.total_limit", "0", "must be >= 1 (or null to keep every checkpoint)");
  }
  if (project.iteration && *project.iteration < 0) {
    invalid("project.iteration", std::to_string(*project.iteration), "must be >= 0");
  }
  if (project.project_dir.empty()) invalid("project.dir", "''", "must not be empty");
  if (timeout_s && !(std::isfinite(*timeout_s) && *timeout_s >= 0)) {
    invalid("distributed.timeout_s", number(*timeout_s), "must be a finite number of seconds >= 0");
  }
}

std::size_t EngineConfig::bucket_cap_bytes() const {
  check_mb("distributed.bucket_cap_mb", bucket_cap_mb);
  return mb_to_bytes(bucket_cap_mb);
}

std::size_t EngineConfig::first_bucket_bytes() const {
  check_mb("distributed.first_bucket_mb", first_bucket_mb);
  return mb_to_bytes(first_bucket_mb);
}

std::vector<std::pair<std::string, std::string>> EngineConfig::cross_rank_settings() const {
  std::vector<std::pair<std::string, std::string>> s = {
      {"training.gradient_accumulation_steps", std::to_string(gradient_accumulation_steps)},
      {"training.sync_with_dataloader", boolean(sync_with_dataloader)},
      {"training.mixed_precision", std::string(to_string(mixed_precision))},
      {"training.nan_policy", std::string(to_string(nan_policy))},
      {"distributed.bucket_cap_mb", exact(bucket_cap_mb)},
      {"distributed.first_bucket_mb", exact(first_bucket_mb)},
      {"distributed.overlap", boolean(overlap)},
      {"distributed.grad_comm_dtype", wire_name(grad_comm_dtype)},
      {"distributed.allreduce_algorithm", allreduce_algorithm},
      {"distributed.unused_parameters", std::string(to_string(unused_parameters))},
      {"distributed.zero_stage", std::to_string(zero_stage)},
      {"distributed.check_collectives", boolean(check_collectives)},
      {"distributed.debug_collectives", boolean(debug_collectives)},
      {"data.split_batches", boolean(split_batches)},
      {"data.even_batches", boolean(even_batches)},
      // Off, CheckpointManager::save throws before its first broadcast, and load_state()
      // skips one: ranks that disagree would wait for each other in save_state().
      {"project.automatic_checkpoint_naming", boolean(project.automatic_checkpoint_naming)},
  };
  if (mixed_precision == Precision::fp16) {
    const LossScalerOptions& o = loss_scaler;
    s.insert(s.end(), {
        {"training.loss_scaler.enabled", boolean(o.enabled)},
        {"training.loss_scaler.dynamic", boolean(o.dynamic)},
        {"training.loss_scaler.init_scale", exact(o.init_scale)},
        {"training.loss_scaler.growth_factor", exact(o.growth_factor)},
        {"training.loss_scaler.backoff_factor", exact(o.backoff_factor)},
        {"training.loss_scaler.growth_interval", std::to_string(o.growth_interval)},
        {"training.loss_scaler.hysteresis", std::to_string(o.hysteresis)},
        {"training.loss_scaler.consecutive_hysteresis", boolean(o.consecutive_hysteresis)},
        {"training.loss_scaler.min_scale", exact(o.min_scale)},
    });
  }
  return s;
}

}  // namespace mpitrain
