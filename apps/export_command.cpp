#include "export_command.hpp"

#include <fmt/format.h>

#include <exception>
#include <map>
#include <span>
#include <vector>

#include "checkpoint_argument.hpp"
#include "config_checked.hpp"
#include "mpitrain/checkpoint/load_model.hpp"
#include "mpitrain/checkpoint/save_model.hpp"

namespace mpitrain::app {
namespace {

// Throws ConfigError unless `output`'s extension names `format` (`format_name` as the user
// spelt it): .h5 or .hdf5, or .safetensors. load_model and `trainer eval` tell a weights
// file's format by it.
void check_output_extension(const std::filesystem::path& output, checkpoint::ModelFormat format,
                            const std::string& format_name) {
  const std::string ext = output.extension().string();
  const bool h5 = format == checkpoint::ModelFormat::hdf5;
  if (h5 ? (ext == ".h5" || ext == ".hdf5") : ext == ".safetensors") return;
  throw ConfigError(fmt::format(
      "--output {}: --format {} writes a file named *{} (load_model and trainer eval tell the "
      "format by the extension)",
      output.string(), format_name, h5 ? ".h5 or *.hdf5" : ".safetensors"));
}

}  // namespace

std::filesystem::path export_command(const TrainConfig& config, const std::string& argument,
                                     const std::string& format, const std::filesystem::path& output,
                                     Log& log) {
  const checkpoint::ModelFormat kind =
      config_checked("--format", [&] { return checkpoint::parse_model_format(format); });
  check_output_extension(output, kind, format);
  const std::filesystem::path source = resolve_checkpoint_argument(config, argument);
  const std::map<std::string, Tensor> weights = checkpoint::read_model(source);
  std::vector<NamedTensor> named;
  for (const auto& [name, tensor] : weights) named.push_back({name, &tensor});
  const std::filesystem::path written = checkpoint::save_model_file(output, named, kind);
  log.info("exported {} tensors of {} to {} ({})", named.size(), source.string(), written.string(),
           checkpoint::to_string(kind));
  return written;
}

int export_command_on_rank0(const TrainConfig& config, const std::string& argument, const std::string& format,
                            const std::filesystem::path& output, const Communicator& comm, Log& log) {
  int code = 0;
  if (comm.rank() == 0) {
    try {
      export_command(config, argument, format, output, log);
    } catch (const ConfigError& e) {
      log.error("trainer export: {}", e.what());
      code = 2;
    } catch (const std::exception& e) {
      log.error("trainer export: {}", e.what());
      code = 1;
    }
  }
  comm.broadcast(std::span<int>(&code, 1), 0);
  return code;
}

}  // namespace mpitrain::app
