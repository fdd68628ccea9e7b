#include "datasets_from_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "mpitrain/data/hdf5_dataset.hpp"
#include "mpitrain/data/idx_dataset.hpp"
#include "mpitrain/data/synthetic_dataset.hpp"
#include "mpitrain/data/text_dataset.hpp"
#include "mpitrain/data/token_shard.hpp"
#include "mpitrain/data/token_windows.hpp"

namespace mpitrain::app {
namespace {

// Examples [offset, offset + size) of another data set: the synthetic test set is the
// continuation of the training set's index range, so no test example was trained on.
class IndexRange final : public data::Dataset {
 public:
  IndexRange(std::shared_ptr<const data::Dataset> base, std::size_t offset, std::size_t size)
      : base_(std::move(base)), offset_(offset), size_(size) {}
  std::size_t size() const noexcept override { return size_; }
  const Shape& feature_shape() const noexcept override { return base_->feature_shape(); }
  std::optional<std::size_t> num_classes() const noexcept override { return base_->num_classes(); }
  std::string describe() const override {
    return "examples [" + std::to_string(offset_) + ", " + std::to_string(offset_ + size_) +
           ") of " + base_->describe();
  }

 protected:
  void read_batch(std::span<const std::size_t> indices, std::span<float> features_out,
                  std::span<std::int32_t> labels_out) const override {
    shifted_.resize(indices.size());
    std::transform(indices.begin(), indices.end(), shifted_.begin(),
                   [this](std::size_t i) { return i + offset_; });
    base_->get_batch(shifted_, features_out, labels_out);
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  std::size_t offset_;
  std::size_t size_;
  mutable std::vector<std::size_t> shifted_;  // scratch; readers need not be thread-safe
};

// Returns the reader of `src` (the data.<split> keys). Its complaint, naming the file and
// what is wrong (a missing or malformed file, a label outside [0, classes) with its
// example's index), becomes a ConfigError naming the key of that file, so that the run ends
// with exit 2 before training.
std::shared_ptr<const data::Dataset> open(const TrainConfig& config, const std::string& split, const DataSource& src) {
  const std::string& kind = config.data.kind;
  const std::optional<std::size_t> classes =
      config.data.classes ? std::optional<std::size_t>(static_cast<std::size_t>(*config.data.classes)) : std::nullopt;
  std::string key = "data." + split + (kind == "idx" ? ".images" : ".file");
  try {
    if (kind == "idx") {
      return std::make_shared<data::IdxDataset>(data::IdxPaths{*src.images, *src.labels}, classes.value_or(10));
    }
    data::Hdf5DatasetOptions options;
    options.features = *src.features;
    options.labels = *src.labels;
    options.num_classes = classes;
    return std::make_shared<data::Hdf5Dataset>(*src.file, options);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.find("IdxDataset: num_classes") != std::string::npos) key = "data.classes";
    if (kind == "idx" && what.starts_with("IDX labels")) key = "data." + split + ".labels";
    throw ConfigError(config.origin(key) + ": " + key + ": " + what);
  }
}

// The text of data.text.path, its first (1 - validation_fraction) bytes for training and the
// rest (when it holds a window) for evaluation.
void open_text(const TrainConfig& config, DataSets& sets) {
  const auto& t = config.data.text;
  const auto block = static_cast<std::size_t>(t.block_size);
  const auto where = [&](const std::string& key) { return config.origin(key) + ": " + key + ": "; };
  data::TextCorpus corpus;
  try {
    corpus = data::read_text_files(t.path);
  } catch (const std::exception& e) {
    throw ConfigError(where("data.text.path") + e.what());
  }
  const std::size_t n = corpus.bytes.size();
  const auto split = static_cast<std::size_t>(static_cast<double>(n) * (1.0 - t.validation_fraction));
  const auto tokens = std::make_shared<const std::vector<std::uint8_t>>(std::move(corpus.bytes));
  const std::string name = fmt::format("{} ({} file{}, {} bytes)", t.path, corpus.files.size(),
                                       corpus.files.size() == 1 ? "" : "s", n);
  try {
    sets.train = std::make_shared<data::TextDataset>(tokens, 0, split, block,
                                                     fmt::format("{}: training bytes [0, {})", name, split));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(where("data.text.block_size") + e.what());
  }
  if (n - split > block) {
    sets.test = std::make_shared<data::TextDataset>(tokens, split, n, block,
                                                    fmt::format("{}: validation bytes [{}, {})", name, split, n));
  }
  sets.num_classes = 256;
}

// Returns the shards of `pattern` (the value of `key`), each token checked against
// data.tokens.vocab_size; a reader's complaint (naming the file) becomes a ConfigError naming
// the key.
data::TokenCorpus read_shards(const TrainConfig& config, const std::string& key, const std::string& pattern) {
  try {
    return data::read_token_shards(pattern, static_cast<std::size_t>(config.data.tokens.vocab_size));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool vocab = what.find("not below the vocabulary size") != std::string::npos;
    throw ConfigError(config.origin(key) + ": " + key + ": " + what +
                      (vocab ? " (data.tokens.vocab_size, the model's output width)" : ""));
  }
}

// Returns the windows of tokens [begin, end) of `corpus` (read from `key`'s pattern),
// described as the `range` of that pattern.
std::shared_ptr<const data::Dataset> token_windows(const TrainConfig& config, const std::string& key,
                                                   const data::TokenCorpus& corpus, std::size_t begin,
                                                   std::size_t end, const std::string& range) {
  const auto& t = config.data.tokens;
  const std::string name = fmt::format("tokens {} ({} file{}, {} tokens): {} [{}, {})",
                                       key == "data.tokens.val" ? *t.val : *t.train, corpus.files.size(),
                                       corpus.files.size() == 1 ? "" : "s", corpus.tokens.size(), range, begin,
                                       end);
  try {
    return std::make_shared<data::TokenWindows<std::uint16_t>>(corpus.tokens, begin, end,
                                                               static_cast<std::size_t>(t.block_size),
                                                               static_cast<std::size_t>(t.vocab_size), name, "tokens");
  } catch (const std::invalid_argument& e) {
    const std::string blamed = key == "data.tokens.val" ? key : "data.tokens.block_size";
    throw ConfigError(config.origin(blamed) + ": " + blamed + ": " + e.what());
  }
}

// The shards of data.tokens.train for training; those of data.tokens.val for evaluation,
// or, when it is null, the tail validation_fraction of train's tokens (when it holds a
// window), as text data holds out its tail.
void open_tokens(const TrainConfig& config, DataSets& sets) {
  const auto& t = config.data.tokens;
  const data::TokenCorpus train = read_shards(config, "data.tokens.train", *t.train);
  const std::size_t n = train.tokens.size();
  const std::size_t split =
      t.val ? n : static_cast<std::size_t>(static_cast<double>(n) * (1.0 - t.validation_fraction));
  sets.train = token_windows(config, "data.tokens.train", train, 0, split, "training tokens");
  if (t.val) {
    const data::TokenCorpus val = read_shards(config, "data.tokens.val", *t.val);
    sets.test = token_windows(config, "data.tokens.val", val, 0, val.tokens.size(), "validation tokens");
  } else if (n - split > static_cast<std::size_t>(t.block_size)) {
    sets.test = token_windows(config, "data.tokens.train", train, split, n, "validation tokens");
  }
  sets.num_classes = static_cast<std::size_t>(t.vocab_size);
}

}  // namespace

DataSets make_datasets(const TrainConfig& config) {
  DataSets sets;
  if (config.data.kind == "text") {
    open_text(config, sets);
    return sets;
  }
  if (config.data.kind == "tokens") {
    open_tokens(config, sets);
    return sets;
  }
  if (config.data.kind == "synthetic") {
    const auto& s = config.data.synthetic;
    data::SyntheticOptions o;
    o.size = static_cast<std::size_t>(s.train_size + s.test_size);
    o.feature_dim = static_cast<std::size_t>(s.features);
    o.num_classes = static_cast<std::size_t>(s.classes);
    o.seed = static_cast<std::uint64_t>(config.seed);
    auto all = std::make_shared<const data::SyntheticDataset>(o);
    sets.train = std::make_shared<IndexRange>(all, 0, static_cast<std::size_t>(s.train_size));
    if (s.test_size > 0) {
      sets.test = std::make_shared<IndexRange>(all, static_cast<std::size_t>(s.train_size),
                                               static_cast<std::size_t>(s.test_size));
    }
  } else {
    sets.train = open(config, "train", config.data.train);
    const DataSource& t = config.data.test;
    const bool has_test = config.data.kind == "idx" ? t.images.has_value() : t.file.has_value();
    if (has_test) {
      if (config.data.kind == "hdf5" && (!t.features || !t.labels)) {
        throw ConfigError("data.test: hdf5 data needs file, features and labels");
      }
      sets.test = open(config, "test", t);
    }
  }
  if (sets.test && sets.test->feature_size() != sets.train->feature_size()) {
    throw ConfigError("data.test: " + sets.test->describe() + " has " + std::to_string(sets.test->feature_size()) +
                      " features per example, the training set " + std::to_string(sets.train->feature_size()));
  }
  if (config.data.classes) {
    // The readers checked every label against it; synthetic data has its own class count.
    sets.num_classes = static_cast<std::size_t>(*config.data.classes);
    if (config.data.kind == "synthetic" && config.data.synthetic.classes > *config.data.classes) {
      throw ConfigError(fmt::format("{}: data.classes: {} is fewer than the {} classes of data.synthetic.classes",
                                    config.origin("data.classes"), *config.data.classes,
                                    config.data.synthetic.classes));
    }
    return sets;
  }
  // Derived: the largest label + 1 over both sets (hdf5), so no label can be out of range.
  sets.num_classes = sets.train->num_classes().value_or(0);
  if (sets.test) sets.num_classes = std::max(sets.num_classes, sets.test->num_classes().value_or(0));
  if (sets.num_classes < 2) {
    throw ConfigError("data.train: " + sets.train->describe() + " has fewer than 2 classes");
  }
  return sets;
}

}  // namespace mpitrain::app
