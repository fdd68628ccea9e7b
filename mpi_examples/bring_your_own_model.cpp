// Bring your own model: data-parallel training of a model that lives in your own buffers,
// with your own forward, backward and update, and mpitrain only for the distributed part.
//
//   mpirun -np 2 ./bring_your_own_model
//
// The model is a linear regression y = W x + b (W: (1, 4), b: (1)) fitted to
// y* = W* x + b* with a little noise. Every rank draws its own examples. The engine:
//   - checks that every rank registered the same names and shapes, and broadcasts rank 0's
//     initial values (so each rank may initialise however it likes);
//   - decides which micro-steps synchronise (gradient accumulation over 2 micro-batches);
//   - averages the gradients over ranks as soon as your backward reports each one ready
//     (grad_ready), overlapping communication with the rest of your backward;
//   - tells you whether to apply the update (step() is false on non-synchronising
//     micro-steps and on skipped steps).
// Your gradients stay in your buffers: the engine copies them into its buckets when you
// report them ready and writes the averaged values back. (To skip those copies, register a
// parameter with an empty grad span and write into engine.gradient(name) instead.)
// Exit code 0 when the fit converged and every rank holds the same parameters.

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/engine/engine.hpp"

namespace {

constexpr std::size_t kInputs = 4;
constexpr std::size_t kBatch = 16;  // examples per rank per micro-step
constexpr float kTrueW[kInputs] = {1.0f, -2.0f, 0.5f, 3.0f};
constexpr float kTrueB = 0.25f;

}  // namespace

int main(int argc, char** argv) {
  try {
    mpitrain::MpiRuntime runtime(&argc, &argv);
    mpitrain::Communicator comm(runtime);
    mpitrain::EngineConfig config;
    config.gradient_accumulation_steps = 2;
    config.seed = 1234;
    mpitrain::Engine engine(config, comm);

    // Your model's parameters and gradients, in your own buffers. Ranks start differently;
    // register_parameters() replaces every rank's values by rank 0's.
    std::vector<float> w(kInputs, 0.1f * static_cast<float>(comm.rank()));
    std::vector<float> grad_w(kInputs, 0.0f);
    std::vector<float> b(1, 0.0f);
    std::vector<float> grad_b(1, 0.0f);
    engine.register_parameters({{"linear.weight", {1, kInputs}, w, grad_w},
                                {"linear.bias", {1}, b, grad_b}});

    mpitrain::nn::Rng data_rng = engine.process_rng();  // this rank's own examples
    const float lr = 0.1f;
    std::vector<float> x(kBatch * kInputs);
    std::vector<float> y(kBatch);
    std::vector<float> residual(kBatch);
    double loss = 0.0;
    for (int micro_step = 0; micro_step < 400; ++micro_step) {
      auto micro = engine.accumulate();
      // A batch: x ~ U(-1, 1), y = W* x + b* + noise.
      data_rng.fill_uniform(x, -1.0f, 1.0f);
      for (std::size_t i = 0; i < kBatch; ++i) {
        y[i] = kTrueB + 0.01f * data_rng.normal();
        for (std::size_t j = 0; j < kInputs; ++j) y[i] += kTrueW[j] * x[i * kInputs + j];
      }
      // Forward: mean squared error of y_hat = W x + b.
      loss = 0.0;
      for (std::size_t i = 0; i < kBatch; ++i) {
        float y_hat = b[0];
        for (std::size_t j = 0; j < kInputs; ++j) y_hat += w[j] * x[i * kInputs + j];
        residual[i] = y_hat - y[i];
        loss += static_cast<double>(residual[i]) * residual[i] / kBatch;
      }
      // Backward: d(loss)/d(y_hat) = 2 (y_hat - y) / batch, times the engine's factor
      // (1 / (accumulation steps x ranks), and the loss scale under fp16). Report each
      // gradient as soon as it is final: the engine starts averaging it right away.
      engine.backward([&] {
        const float scale = engine.loss_gradient_scale();
        for (std::size_t i = 0; i < kBatch; ++i) grad_b[0] += 2.0f * residual[i] / kBatch * scale;
        engine.grad_ready("linear.bias");
        for (std::size_t i = 0; i < kBatch; ++i) {
          for (std::size_t j = 0; j < kInputs; ++j) {
            grad_w[j] += 2.0f * residual[i] / kBatch * scale * x[i * kInputs + j];
          }
        }
        engine.grad_ready("linear.weight");
      });
      // Your optimizer: plain SGD, applied only when the engine says this is a step.
      if (engine.step()) {
        for (std::size_t j = 0; j < kInputs; ++j) w[j] -= lr * grad_w[j];
        b[0] -= lr * grad_b[0];
      }
      engine.zero_grad();  // clears grad_w and grad_b after each synchronising micro-step
    }

    // Every rank must hold the same parameters, close to the truth.
    std::vector<float> mine = w;
    mine.push_back(b[0]);
    const std::vector<float> all = engine.gather(std::span<const float>(mine));
    bool identical = true;
    for (std::size_t i = 0; i < all.size(); ++i) identical = identical && all[i] == mine[i % mine.size()];
    double error = std::fabs(b[0] - kTrueB);
    for (std::size_t j = 0; j < kInputs; ++j) error = std::max(error, static_cast<double>(std::fabs(w[j] - kTrueW[j])));
    const double mean_loss = engine.reduce(loss, mpitrain::ReduceOp::avg);
    engine.print("steps " + std::to_string(engine.step_count()) + ", last loss " +
                 std::to_string(mean_loss) + ", max |param - truth| " + std::to_string(error) +
                 ", identical on all ranks: " + (identical ? "yes" : "no"));
    const bool ok = identical && error < 0.02 && engine.step_count() == 200;
    return comm.allreduce_value(ok ? 1 : 0, mpitrain::ReduceOp::min) == 1 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bring_your_own_model: %s\n", e.what());
    return 1;
  }
}
