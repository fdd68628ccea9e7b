#pragma once
// TrainConfig: the trainer's configuration, read from YAML with a strict schema
// (apps/config_schema.hpp) and `--set key.path=value` overrides.
//
// Errors are ConfigError: the message names the key and where it came from
// ("run.yaml:12:5" or "--set training.epochs=abc"); the trainer exits 2 on them.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpitrain::app {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DataSource {
  std::optional<std::string> images;    // idx
  std::optional<std::string> labels;    // idx: file; hdf5: dataset name
  std::optional<std::string> file;      // hdf5
  std::optional<std::string> features;  // hdf5: dataset name
};

// The model's keys. model.kind picks the kind; each kind reads its own keys, grouped in its
// own struct. A new kind adds its struct here, its keys to config_schema.cpp, its reading to
// train_config.cpp and its branch to model_from_config.cpp.
struct MlpConfig {
  std::vector<std::int64_t> hidden;  // model.hidden: hidden layer widths
  std::string activation;            // model.activation: relu | gelu | tanh
  double dropout = 0.0;              // model.dropout: probability after each activation
};

// model.kind torchscript: a module saved by torch.jit.save, trained through libtorch.
struct TorchScriptConfig {
  std::string path;                      // model.path: the .pt file ("" when null)
  std::string task;                      // model.task: classification | language_model
  std::vector<std::int64_t> input_shape;  // model.input_shape: one example's shape (empty: flat)
};

struct ModelConfig {
  std::string kind;               // model.kind: mlp | torchscript
  MlpConfig mlp;                  // read whatever the kind; used when kind is mlp
  TorchScriptConfig torchscript;  // read whatever the kind; used when kind is torchscript
};

struct TrainConfig {
  std::int64_t seed = 0;
  ModelConfig model;
  struct {
    std::string kind;
    DataSource train;
    DataSource test;
    struct {
      std::int64_t train_size = 0, test_size = 0, features = 0, classes = 0;
    } synthetic;
    struct {
      std::string path;                // data.text.path: a UTF-8 file or a folder of them
      std::int64_t block_size = 0;     // data.text.block_size: tokens a model sees at once
      double validation_fraction = 0;  // data.text.validation_fraction: the held-out tail
    } text;
    struct {
      std::optional<std::string> train;  // data.tokens.train: a shard or a glob of shards
      std::optional<std::string> val;    // data.tokens.val: the same; null: a tail of train
      double validation_fraction = 0;    // data.tokens.validation_fraction: that tail
      std::int64_t block_size = 0;       // data.tokens.block_size: tokens a model sees at once
      std::int64_t vocab_size = 0;       // data.tokens.vocab_size: the model's output width
    } tokens;
    std::optional<std::int64_t> classes;  // data.classes: the model's outputs; null: derived
    std::int64_t batch_size = 0;
    bool shuffle = true, drop_last = false, split_batches = false, even_batches = true;
  } data;
  struct {
    std::string kind;
    double lr = 0, weight_decay = 0;
    std::vector<double> betas;
    double eps = 0, momentum = 0;
    bool nesterov = false;
  } optimizer;
  struct {
    std::string kind;
    std::int64_t warmup_steps = 0;
  } scheduler;
  struct {
    std::int64_t epochs = 1;
    std::optional<std::int64_t> max_steps;
    std::int64_t gradient_accumulation_steps = 1;
    std::optional<double> max_grad_norm;
    std::string mixed_precision;
    std::string nan_policy;
    std::int64_t max_consecutive_skipped_steps = 100;  // 0: unlimited
    std::int64_t log_every = 50;
    bool eval = true;
  } training;
  struct {
    double bucket_cap_mb = 25, first_bucket_mb = 1;
    bool overlap = true;
    std::string grad_comm_dtype;
    std::int64_t zero_stage = 0;  // 0 | 1 (EngineConfig::zero_stage)
    double timeout_s = 600;
    bool debug_collectives = false;
    std::optional<std::string> algorithm_table;  // collective_bench --tune output; null: built-in
  } distributed;
  struct {
    std::string dir;
    bool automatic_checkpoint_naming = true;
    std::optional<std::int64_t> total_limit;
    std::optional<std::int64_t> save_every_steps;
    std::string resume;
    bool overwrite = false;  // a fresh run may replace an earlier run in dir (previous_run.hpp)
    std::string save_format = "h5";  // model.h5 or model.safetensors at the end of the run
  } project;

  // The effective configuration as YAML (every key, defaults filled in): what the run used.
  std::string yaml;
  // Where each key's value was set: "run.yaml:12:5" or "--set key.path=value"; keys left at
  // their defaults are absent.
  std::map<std::string, std::string> origins;
  // The config file, or "config" when there is none.
  std::string source = "config";

  // Returns where `key` was set, to start an error message found after loading (a check
  // that needs the data or the checkpoint folder): its origin, or `source` for a default.
  std::string origin(const std::string& key) const;
  // Returns the key of a language model's window length: data.tokens.block_size for
  // data.kind tokens, data.text.block_size otherwise.
  std::string block_size_key() const;
};

// Returns the configuration of `path` (empty: defaults only) with `overrides` ("a.b=v",
// v read as a YAML scalar or flow list) applied in order. Throws ConfigError.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides);

// Returns the full default configuration as commented YAML.
std::string default_config_yaml();

// Returns the effective configuration of `path` and `overrides` (as load_config, which
// checks it) as YAML, each key commented with where its value came from, then its help:
// "epochs: 9  # [--set training.epochs=9] passes over the training set"; "[default]",
// "[run.yaml:3:11]" (file:line:column of the value). `trainer print-config`.
std::string effective_config_yaml(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace mpitrain::app
