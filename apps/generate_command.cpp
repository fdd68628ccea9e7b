#include "generate_command.hpp"

#include <cstdio>
#include <exception>
#include <span>

#include "checkpoint_argument.hpp"

namespace mpitrain::app {

int generate_command_on_rank0(const TrainConfig& config, const std::string& checkpoint, const GenerateOptions& options,
                              const Communicator& comm, Log& log) {
  int code = 0;
  if (comm.rank() == 0) {
    try {
      const std::string text = generate_text(config, resolve_checkpoint_argument(config, checkpoint), options);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    } catch (const ConfigError& e) {
      log.error("trainer generate: {}", e.what());
      code = 2;
    } catch (const std::exception& e) {
      log.error("trainer generate: {}", e.what());
      code = 1;
    }
  }
  comm.broadcast(std::span<int>(&code, 1), 0);
  return code;
}

}  // namespace mpitrain::app
