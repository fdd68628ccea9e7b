#include "options.hpp"

#include <algorithm>
#include <cctype>

namespace mpitrain::bench {

std::size_t parse_bytes(const std::string& flag, const std::string& text) {
  std::size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw UsageError(flag + ": '" + text + "' is not a size (e.g. 4096, 1K, 256M, 1G)");
  }
  std::string suffix = text.substr(pos);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix == "" || suffix == "B") shift = 0;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") shift = 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") shift = 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") shift = 30;
  else throw UsageError(flag + ": '" + text + "' is not a size (e.g. 4096, 1K, 256M, 1G)");
  if (value == 0 || value > (1ull << 40) >> shift) {
    throw UsageError(flag + ": '" + text + "' must be between 1 byte and 1 TiB");
  }
  return static_cast<std::size_t>(value) << shift;
}

std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> types;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string name = text.substr(begin, end - begin);
    if (name != "f32" && name != "f64" && name != "bf16" && name != "f16") {
      throw UsageError("--dtype: unknown type '" + name +
                       "' (valid: f32, f64, bf16, f16, or a comma-separated list of them)");
    }
    const DType type = parse_dtype(name);
    if (std::find(types.begin(), types.end(), type) != types.end()) {
      throw UsageError("--dtype: '" + name + "' is listed twice in '" + text + "'");
    }
    types.push_back(type);
    if (end == text.size()) break;
    begin = end + 1;
  }
  return types;
}

}  // namespace mpitrain::bench
