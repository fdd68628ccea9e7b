#include "engine_from_config.hpp"

namespace mpitrain::app {

EngineConfig engine_config(const TrainConfig& c) {
  EngineConfig e;
  e.gradient_accumulation_steps = static_cast<std::size_t>(c.training.gradient_accumulation_steps);
  e.mixed_precision = parse_precision(c.training.mixed_precision);
  e.nan_policy = parse_nan_policy(c.training.nan_policy);
  e.bucket_cap_mb = c.distributed.bucket_cap_mb;
  e.first_bucket_mb = c.distributed.first_bucket_mb;
  e.overlap = c.distributed.overlap;
  e.zero_stage = static_cast<int>(c.distributed.zero_stage);
  e.timeout_s = c.distributed.timeout_s;
  e.debug_collectives = c.distributed.debug_collectives;
  const std::string& wire = c.distributed.grad_comm_dtype;
  e.grad_comm_dtype = wire == "bf16" ? DType::bf16 : wire == "fp16" ? DType::f16 : DType::f32;
  e.split_batches = c.data.split_batches;
  e.even_batches = c.data.even_batches;
  e.seed = static_cast<std::uint64_t>(c.seed);
  e.project.project_dir = c.project.dir;
  e.project.automatic_checkpoint_naming = c.project.automatic_checkpoint_naming;
  if (c.project.total_limit) e.project.total_limit = static_cast<std::size_t>(*c.project.total_limit);
  return e;
}

data::DataLoaderOptions train_loader_options(const TrainConfig& c) {
  data::DataLoaderOptions o;
  o.batch_size = static_cast<std::size_t>(c.data.batch_size);
  o.shuffle = c.data.shuffle;
  o.seed = static_cast<std::uint64_t>(c.seed);
  o.drop_last = c.data.drop_last;
  return o;
}

data::DataLoaderOptions test_loader_options(const TrainConfig& c) {
  data::DataLoaderOptions o = train_loader_options(c);
  o.shuffle = false;
  o.drop_last = false;
  return o;
}

}  // namespace mpitrain::app
