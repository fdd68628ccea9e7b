#pragma once
// The cross-rank agreement of Engine::prepare() and Engine::register_parameters()
// (engine/engine_prepare_agreement.cpp). Implementation-only: not installed.

#include <cstdint>
#include <string>
#include <string_view>

#include "mpitrain/collectives/communicator.hpp"
#include "mpitrain/engine/engine_config.hpp"

namespace mpitrain::detail {

// Ends the local error of a parameter or buffer whose quoted name
// checkpoint::is_valid_object_name refuses: a name the first save would fail on.
inline constexpr const char* kBadNameReason =
    " cannot name an object in a checkpoint (it is empty, starts or ends with '/', or has an "
    "empty, '.' or '..' part between slashes)";

// Returns the FNV-1a 64-bit hash of `text` (a fingerprint, not a security measure).
std::uint64_t fingerprint(std::string_view text);

// Returns the "key\tvalue" lines of the settings every rank must share.
std::string describe_settings(const EngineConfig& config);

// Collective: one allgather of (error flag, settings hash, parameter-list hash) per rank.
// Throws on EVERY rank, naming the rank(s) and values, when some rank's `local_error` (its
// own invalid arguments; empty: none) is set (std::invalid_argument), when the ranks'
// `settings` ("key\tvalue" lines) differ (std::invalid_argument, the first differing key)
// or when their parameter `description`s ("name\tshape" lines) differ (std::runtime_error,
// the first differing parameter). `who` starts the messages. The caller's CommStream must
// be idle.
void agree_on_prepare(const Communicator& comm, std::string_view who, const std::string& settings,
                      const std::string& description, const std::string& local_error);

}  // namespace mpitrain::detail
