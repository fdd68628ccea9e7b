#pragma once
// config_checked: runs a library call that takes settings from the config, and turns the
// library's complaint about a setting (std::invalid_argument) into a ConfigError naming the
// config key, so the trainer exits 2 with "KEY: what is wrong".

#include <stdexcept>
#include <string>
#include <string_view>

#include "train_config.hpp"

namespace mpitrain::app {

// Returns `f()`; throws ConfigError("<key>: <what>") when it throws std::invalid_argument.
template <class F>
auto config_checked(std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string(key) + ": " + e.what());
  }
}

}  // namespace mpitrain::app
