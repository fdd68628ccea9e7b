// nn_bench: training-step throughput of the nn/ substrate on one rank with one BLAS thread,
// and the share of the step spent outside GEMM.
//
//   nn_bench [--steps N] [--warmup N] [--optimizer adamw|sgd] [--stat min|median]
//
// For MLP 784-256-256-10 at batch 64 and 784-1024-1024-10 at batch 128 (ReLU, as the
// trainer's default model), a step is zero_grad + forward + cross-entropy + backward +
// optimizer step: AdamW (default, when nn/adamw.hpp is built) or plain SGD written inline
// (w -= lr g). The input needs no gradient (as in torch, where the batch has
// requires_grad=False).
// Columns: fwd_bwd_ms = zero_grad + forward + loss + backward, opt_ms = the optimizer step.
// GEMM share: the same GEMMs a step runs (forward x W^T, dW = g^T x, dX = g W except for the
// first layer), with the same shapes, timed alone, interleaved with the training steps;
// outside_gemm% = 1 - gemm / step (the whole step) and, for the layers alone,
// layers_outside% = 1 - gemm / fwd_bwd. Each time is a statistic over the steps: the
// minimum by default (on a shared machine, the best step estimates the uncontended cost;
// step = min over steps of fwd_bwd + opt) or the median; samples/s = batch / step.
// benchmarks/nn_bench_torch.py measures torch on the same models and batches, so both can
// be compared in one session.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/nn/blas_threads.hpp"
#include "mpitrain/nn/cross_entropy_loss.hpp"
#include "mpitrain/nn/gemm.hpp"
#include "mpitrain/nn/mlp.hpp"
#include "mpitrain/nn/rng.hpp"
#if __has_include("mpitrain/nn/adamw.hpp")
#include "mpitrain/nn/adamw.hpp"
#define NN_BENCH_HAVE_ADAMW 1
#endif

namespace {

using namespace mpitrain;
using namespace mpitrain::nn;
using Clock = std::chrono::steady_clock;

struct Case {
  std::size_t in;
  std::vector<std::size_t> hidden;
  std::size_t out;
  std::size_t batch;
};

enum class OptimizerKind { adamw, sgd };

constexpr std::size_t kBatches = 8;  // distinct input batches cycled through

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One model with its batches and optimizer, plus separate buffers for the GEMM-only loop.
class Bench {
 public:
  Bench(const Case& c, OptimizerKind which)
      : c_(c), model_(make_mlp(c.in, c.hidden, c.out, Activation::relu, 0.0f, 1)) {
    model_.set_requires_input_grad(false);
    params_ = model_.parameters();
    Rng rng(2, 0);
    labels_.resize(kBatches * c.batch);
    for (std::size_t b = 0; b < kBatches; ++b) {
      xs_.emplace_back(Shape{c.batch, c.in});
      rng.fill_uniform(xs_.back().span(), 0.0f, 1.0f);
    }
    for (auto& l : labels_) l = static_cast<std::int32_t>(rng.next_u32() % c.out);
#ifdef NN_BENCH_HAVE_ADAMW
    if (which == OptimizerKind::adamw) adamw_ = std::make_unique<AdamW>(params_, AdamWOptions{});
#else
    (void)which;
#endif
    widths_.push_back(c.in);
    widths_.insert(widths_.end(), c.hidden.begin(), c.hidden.end());
    widths_.push_back(c.out);
    for (std::size_t l = 0; l < widths_.size(); ++l) {
      acts_.emplace_back(Shape{c.batch, widths_[l]});
      grads_.emplace_back(Shape{c.batch, widths_[l]});
      rng.fill_uniform(acts_.back().span(), -1.0f, 1.0f);
      rng.fill_uniform(grads_.back().span(), -1.0f, 1.0f);
    }
    for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
      weights_.emplace_back(Shape{widths_[l + 1], widths_[l]});
      wgrads_.emplace_back(Shape{widths_[l + 1], widths_[l]});
      rng.fill_uniform(weights_.back().span(), -0.05f, 0.05f);
    }
  }

  // Runs training step i; adds its zero_grad..backward and optimizer seconds to the vectors.
  void step(std::size_t i, std::vector<double>& fwd_bwd_s, std::vector<double>& opt_s) {
    const std::size_t b = i % kBatches;
    const auto t0 = Clock::now();
    zero_grad(params_);
    const Tensor logits = model_.forward(xs_[b]);
    cross_entropy(logits,
                  std::span<const std::int32_t>(labels_).subspan(b * c_.batch, c_.batch),
                  grad_logits_);
    model_.backward(grad_logits_);
    const auto t1 = Clock::now();
    update();
    fwd_bwd_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    opt_s.push_back(seconds_since(t1));
  }

  // Runs the GEMMs of one step alone (forward x W^T, dW += g^T x, dX = g W but for the first
  // layer, same shapes); returns their seconds.
  double gemm_step() {
    const auto t0 = Clock::now();
    const std::size_t layers = widths_.size() - 1;
    const std::size_t rows = c_.batch;
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t in = widths_[l], out = widths_[l + 1];
      gemm(Trans::no, Trans::yes, rows, out, in, 1.0f, acts_[l].data(), in, weights_[l].data(),
           in, 0.0f, acts_[l + 1].data(), out);
    }
    for (std::size_t l = layers; l-- > 0;) {
      const std::size_t in = widths_[l], out = widths_[l + 1];
      gemm(Trans::yes, Trans::no, out, in, rows, 1.0f, grads_[l + 1].data(), out,
           acts_[l].data(), in, 1.0f, wgrads_[l].data(), in);
      if (l > 0) {
        gemm(Trans::no, Trans::no, rows, in, out, 1.0f, grads_[l + 1].data(), out,
             weights_[l].data(), in, 0.0f, grads_[l].data(), in);
      }
    }
    return seconds_since(t0);
  }

 private:
  void update() {
#ifdef NN_BENCH_HAVE_ADAMW
    if (adamw_) {
      adamw_->step();
      return;
    }
#endif
    for (Parameter* p : params_) {
      float* w = p->value.data();
      const float* g = p->grad.data();
      for (std::size_t i = 0, n = p->value.numel(); i < n; ++i) w[i] -= 0.01f * g[i];
    }
  }

  Case c_;
  Sequential model_;
  std::vector<Parameter*> params_;
  std::vector<Tensor> xs_;
  std::vector<std::int32_t> labels_;
  Tensor grad_logits_;
#ifdef NN_BENCH_HAVE_ADAMW
  std::unique_ptr<AdamW> adamw_;
#endif
  std::vector<std::size_t> widths_;
  std::vector<Tensor> acts_, grads_, weights_, wgrads_;
};

// Returns the minimum or the median of `v` (reordered).
double statistic(std::vector<double> v, bool use_min) {
  if (use_min) return *std::min_element(v.begin(), v.end());
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::size_t parse_count(std::string_view flag, const char* value) {
  if (value == nullptr) throw std::invalid_argument(std::string(flag) + " needs a value");
  const long v = std::strtol(value, nullptr, 10);
  if (v <= 0) throw std::invalid_argument(std::string(flag) + " must be a positive integer");
  return static_cast<std::size_t>(v);
}

std::string describe(const Case& c) {
  std::string s = std::to_string(c.in);
  for (std::size_t h : c.hidden) s.append(1, '-').append(std::to_string(h));
  return s.append(1, '-').append(std::to_string(c.out));
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t steps = 0;  // 0: per-case default
  std::size_t warmup = 5;
#ifdef NN_BENCH_HAVE_ADAMW
  OptimizerKind optimizer = OptimizerKind::adamw;
#else
  OptimizerKind optimizer = OptimizerKind::sgd;
#endif
  bool use_min = true;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--steps") {
        steps = parse_count(arg, i + 1 < argc ? argv[++i] : nullptr);
      } else if (arg == "--warmup") {
        warmup = parse_count(arg, i + 1 < argc ? argv[++i] : nullptr);
      } else if (arg == "--stat" && i + 1 < argc) {
        const std::string_view name = argv[++i];
        if (name != "min" && name != "median") {
          throw std::invalid_argument("unknown statistic '" + std::string(name) + "'");
        }
        use_min = name == "min";
      } else if (arg == "--optimizer" && i + 1 < argc) {
        const std::string_view name = argv[++i];
        if (name == "sgd") {
          optimizer = OptimizerKind::sgd;
#ifdef NN_BENCH_HAVE_ADAMW
        } else if (name == "adamw") {
          optimizer = OptimizerKind::adamw;
#endif
        } else {
          throw std::invalid_argument("unknown optimizer '" + std::string(name) + "'");
        }
      } else {
        throw std::invalid_argument(
            "unknown argument '" + std::string(arg) +
            "' (usage: nn_bench [--steps N] [--warmup N] [--optimizer adamw|sgd] "
            "[--stat min|median])");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nn_bench: %s\n", e.what());
    return 2;
  }
  set_blas_threads(1);
  const std::vector<Case> cases{{784, {256, 256}, 10, 64}, {784, {1024, 1024}, 10, 128}};
  std::printf("# nn_bench: 1 rank, %zu BLAS thread(s), ReLU MLP, cross-entropy, optimizer %s, "
              "%s over steps\n",
              blas_threads(), optimizer == OptimizerKind::adamw ? "AdamW" : "SGD (inline)",
              use_min ? "minimum" : "median");
  std::printf("%-16s %6s %10s %9s %11s %8s %9s %14s %17s\n", "model", "batch", "samples/s",
              "step_ms", "fwd_bwd_ms", "opt_ms", "gemm_ms", "outside_gemm%",
              "layers_outside%");
  for (const Case& c : cases) {
    const std::size_t n = steps > 0 ? steps : (c.hidden[0] > 512 ? 40 : 300);
    Bench bench(c, optimizer);
    std::vector<double> fwd_bwd, opt, gemm_only;
    for (std::size_t i = 0; i < warmup; ++i) {
      bench.step(i, fwd_bwd, opt);
      bench.gemm_step();
    }
    fwd_bwd.clear();
    opt.clear();
    // Interleaved, so that both see the same machine load.
    for (std::size_t i = 0; i < n; ++i) {
      bench.step(i, fwd_bwd, opt);
      gemm_only.push_back(bench.gemm_step());
    }
    std::vector<double> whole(fwd_bwd.size());
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = fwd_bwd[i] + opt[i];
    const double fwd_bwd_s = statistic(fwd_bwd, use_min);
    const double opt_s = statistic(opt, use_min);
    const double gemm_s = statistic(gemm_only, use_min);
    const double step_s = statistic(whole, use_min);
    std::printf("%-16s %6zu %10.0f %9.3f %11.3f %8.3f %9.3f %13.1f%% %16.1f%%\n",
                describe(c).c_str(), c.batch, static_cast<double>(c.batch) / step_s,
                step_s * 1e3, fwd_bwd_s * 1e3, opt_s * 1e3, gemm_s * 1e3,
                100.0 * std::max(0.0, 1.0 - gemm_s / step_s),
                100.0 * std::max(0.0, 1.0 - gemm_s / fwd_bwd_s));
  }
  return 0;
}
