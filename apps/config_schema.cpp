#include "config_schema.hpp"

#include <algorithm>

namespace mpitrain::app {
namespace {

using K = ValueKind;
constexpr std::string_view kFashion = "/usr/share/datasets/fashion-mnist/";

// The keys of each section, in print-config order. A model kind adds its own keys to
// seed_and_model_keys() (DESIGN.md section 6 lists them).
std::vector<KeySpec> seed_and_model_keys() {
  return {
      {"seed", K::integer, "0", "seeds model init (same on every rank), shuffling and dropout",
       false, {}, 0.0},
      {"model.kind", K::choice, "mlp", "model architecture: mlp | torchscript (a torch.jit.save file)",
       false, {"mlp", "torchscript"}},
      {"model.hidden", K::integer_list, "[256, 256]", "hidden layer widths", false, {}, 1.0},
      {"model.activation", K::choice, "relu", "activation between layers", false,
       {"relu", "gelu", "tanh"}},
      {"model.dropout", K::number, "0.0", "dropout probability after each activation", false, {},
       0.0, 1.0, true},
      {"model.path", K::string, "null", "torchscript: the module's .pt file (torch.jit.save)", true},
      {"model.task", K::choice, "classification",
       "torchscript: classification ((batch, classes) logits) | language_model ((batch, block, vocab) logits)",
       false, {"classification", "language_model"}},
      {"model.input_shape", K::integer_list, "null",
       "torchscript: one example's input shape, e.g. [1, 28, 28] (null: the flat features)", true, {}, 1.0},
  };
}

std::vector<KeySpec> data_keys() {
  return {
      {"data.kind", K::choice, "idx", "idx (MNIST format, .gz or not) | hdf5 | synthetic | text | tokens", false,
       {"idx", "hdf5", "synthetic", "text", "tokens"}},
      {"data.train.images", K::string, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
       "idx: images file", true},
      {"data.train.labels", K::string, "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz",
       "idx: labels file; hdf5: name of the labels dataset", true},
      {"data.train.file", K::string, "null", "hdf5: the file", true},
      {"data.train.features", K::string, "null", "hdf5: name of the features dataset", true},
      {"data.test.images", K::string, "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
       "idx: images file (null: no test set)", true},
      {"data.test.labels", K::string, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz",
       "idx: labels file; hdf5: name of the labels dataset", true},
      {"data.test.file", K::string, "null", "hdf5: the file (null: no test set)", true},
      {"data.test.features", K::string, "null", "hdf5: name of the features dataset", true},
      {"data.synthetic.train_size", K::integer, "60000", "synthetic: training examples", false, {},
       1.0},
      {"data.synthetic.test_size", K::integer, "10000", "synthetic: test examples (0: none)",
       false, {}, 0.0},
      {"data.synthetic.features", K::integer, "784", "synthetic: features per example", false, {},
       1.0},
      {"data.synthetic.classes", K::integer, "10", "synthetic: number of classes", false, {}, 2.0},
      {"data.text.path", K::string, "/usr/share/games/fortunes",
       "text: a UTF-8 file, or a folder of them (links and *.dat left out); byte tokens"},
      {"data.text.block_size", K::integer, "128", "text: tokens a model sees at once (windows of block_size + 1)",
       false, {}, 1.0},
      {"data.text.validation_fraction", K::number, "0.1", "text: the tail held out for evaluation", false, {},
       0.0, 1.0, true},
      {"data.tokens.train", K::string, "null",
       "tokens: an llm.c .bin token shard, or a glob of them (name order, concatenated)", true},
      {"data.tokens.val", K::string, "null",
       "tokens: validation shard(s), same forms (null: hold out validation_fraction of train)", true},
      {"data.tokens.validation_fraction", K::number, "0.1",
       "tokens: the tail of train held out for evaluation when val is null", false, {}, 0.0, 1.0, true},
      {"data.tokens.block_size", K::integer, "128",
       "tokens: tokens a model sees at once (windows of block_size + 1)", false, {}, 1.0},
      {"data.tokens.vocab_size", K::integer, "50257",
       "tokens: the model's output width; every token id must be below it (GPT-2's: 50257)", false, {}, 2.0,
       65536.0},
      {"data.classes", K::integer, "null",
       "model outputs; labels must lie in [0, classes) (null: idx 10, hdf5 max label + 1)",
       true, {}, 2.0},
      {"data.batch_size", K::integer, "64", "per rank (global, when split_batches)", false, {},
       1.0},
      {"data.shuffle", K::boolean, "true", "reshuffle every epoch (seed + epoch)"},
      {"data.drop_last", K::boolean, "false", "drop the tail instead of padding it"},
      {"data.split_batches", K::boolean, "false", "batch_size is global and split across ranks"},
      {"data.even_batches", K::boolean, "true",
       "every rank gets the same number of batches (wraps around)"},
  };
}

std::vector<KeySpec> training_keys() {
  return {
      {"optimizer.kind", K::choice, "adamw", "adamw | sgd", false, {"adamw", "sgd"}},
      {"optimizer.lr", K::number, "1.0e-3", "base learning rate", false, {}, 0.0},
      {"optimizer.weight_decay", K::number, "0.01", "decoupled (adamw) or L2 (sgd)", false, {},
       0.0},
      {"optimizer.betas", K::number_list, "[0.9, 0.999]", "adamw: moment decay rates", false, {},
       0.0, 1.0, true, 2},
      {"optimizer.eps", K::number, "1.0e-8", "adamw: denominator epsilon", false, {}, 0.0},
      {"optimizer.momentum", K::number, "0.0", "sgd: momentum factor", false, {}, 0.0},
      {"optimizer.nesterov", K::boolean, "false", "sgd: Nesterov momentum (needs momentum > 0)"},
      {"scheduler.kind", K::choice, "constant", "constant | linear | cosine (after warm-up)",
       false, {"constant", "linear", "cosine"}},
      {"scheduler.warmup_steps", K::integer, "0", "linear warm-up steps", false, {}, 0.0},
      {"training.epochs", K::integer, "1", "passes over the training set", false, {}, 1.0},
      {"training.max_steps", K::integer, "null", "stop after this many optimizer steps", true, {},
       1.0},
      {"training.gradient_accumulation_steps", K::integer, "1",
       "micro-batches per optimizer step", false, {}, 1.0},
      {"training.max_grad_norm", K::number, "null", "clip the global L2 norm to this", true, {},
       0.0},
      {"training.mixed_precision", K::choice, "\"no\"", "\"no\" | bf16 | fp16 (emulated on CPU)",
       false, {"no", "bf16", "fp16"}},
      {"training.nan_policy", K::choice, "error", "non-finite gradients: error | skip the step",
       false, {"error", "skip"}},
      {"training.max_consecutive_skipped_steps", K::integer, "100",
       "end the run (exit 1) after this many skipped steps in a row (0: never)", false, {}, 0.0},
      {"training.log_every", K::integer, "50", "steps between metrics lines", false, {}, 1.0},
      {"training.eval", K::boolean, "true", "evaluate on the test set after every epoch"},
  };
}

std::vector<KeySpec> run_keys() {
  return {
      {"distributed.bucket_cap_mb", K::number, "25", "gradient bucket size, MiB", false, {}, 0.0,
       1048576.0, false, {}, true},
      {"distributed.first_bucket_mb", K::number, "1", "first (last layers') bucket, MiB", false,
       {}, 0.0, 1048576.0, false, {}, true},
      {"distributed.overlap", K::boolean, "true", "reduce buckets while backward runs"},
      {"distributed.grad_comm_dtype", K::choice, "fp32", "gradients on the wire: fp32|bf16|fp16",
       false, {"fp32", "bf16", "fp16"}},
      {"distributed.zero_stage", K::integer, "0",
       "0 | 1: ZeRO stage 1 shards the optimizer state across ranks", false, {}, 0.0, 1.0},
      {"distributed.timeout_s", K::number, "600",
       "seconds without progress before the job is aborted, naming the rank (0: never)", false,
       {}, 0.0},
      {"distributed.debug_collectives", K::boolean, "false",
       "check every collective across ranks before it runs (MPITRAIN_DEBUG_COLLECTIVES=1)"},
      {"distributed.algorithm_table", K::string, "null",
       "collective algorithm table from collective_bench --tune (null: built-in rules)", true},
      {"project.dir", K::string, "runs/default", "checkpoints and metrics.jsonl go here"},
      {"project.automatic_checkpoint_naming", K::boolean, "true",
       "checkpoints/checkpoint_<N>; false: checkpoints/step_<S>"},
      {"project.total_limit", K::integer, "null", "keep at most this many checkpoints", true, {},
       1.0},
      {"project.save_every_steps", K::integer, "null", "save a checkpoint every N steps", true,
       {}, 1.0},
      {"project.resume", K::string, "none", "none | latest | PATH of a checkpoint"},
      {"project.overwrite", K::boolean, "false",
       "a fresh run removes an earlier run's metrics, checkpoints and model first"},
      {"project.save_format", K::choice, "h5", "weights written at the end: h5 | safetensors",
       false, {"h5", "safetensors"}},
  };
}

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = [] {
    std::vector<KeySpec> all;
    for (std::vector<KeySpec> section : {seed_and_model_keys(), data_keys(), training_keys(), run_keys()}) {
      all.insert(all.end(), section.begin(), section.end());
    }
    return all;
  }();
  return keys;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::span<const KeySpec> config_schema() { return schema(); }

const KeySpec* find_key(std::string_view path) {
  for (const KeySpec& k : schema()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

bool is_section(std::string_view path) {
  for (const KeySpec& k : schema()) {
    if (k.path.size() > path.size() && k.path.starts_with(path) && k.path[path.size()] == '.') {
      return true;
    }
  }
  return false;
}

std::string closest_name(std::string_view name, std::span<const std::string> candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, name.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(name, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

}  // namespace mpitrain::app
