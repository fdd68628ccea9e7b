#include "mpitrain/checkpoint/rank_agreement.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "mpitrain/checkpoint/checkpoint_error.hpp"

namespace mpitrain::checkpoint {
namespace {
constexpr std::size_t kMaxMessageBytes = 2000;  // enough for a path and an HDF5 stack
}  // namespace

void agree_on_success(const Communicator& comm, const std::optional<std::string>& error,
                      std::string_view what) {
  const std::string mine = error ? error->substr(0, kMaxMessageBytes) : std::string();
  const std::int64_t my_length = error ? static_cast<std::int64_t>(mine.size()) : -1;
  const std::vector<std::int64_t> lengths = comm.allgather_value<std::int64_t>(my_length);
  if (std::all_of(lengths.begin(), lengths.end(), [](std::int64_t n) { return n < 0; })) return;

  std::vector<std::size_t> counts(lengths.size());
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    counts[r] = static_cast<std::size_t>(std::max<std::int64_t>(lengths[r], 0));
  }
  std::size_t total = 0;
  for (const std::size_t c : counts) total += c;
  std::vector<std::uint8_t> all(total);
  const std::span<const std::uint8_t> send(reinterpret_cast<const std::uint8_t*>(mine.data()),
                                           mine.size());
  comm.allgatherv<std::uint8_t>(send, std::span<std::uint8_t>(all), counts);

  std::string ranks;
  std::string messages;
  std::size_t offset = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    if (lengths[r] >= 0) {
      if (!ranks.empty()) {
        ranks += ", ";
        messages += "; ";
      }
      ranks += std::to_string(r);
      messages += "[rank " + std::to_string(r) + "] ";
      messages.append(reinterpret_cast<const char*>(all.data()) + offset, counts[r]);
    }
    offset += counts[r];
  }
  throw CheckpointError(std::string(what) + " failed on rank(s) " + ranks + ": " + messages);
}

std::string broadcast_string(const Communicator& comm, const std::string& text, int root) {
  std::int64_t length = comm.rank() == root ? static_cast<std::int64_t>(text.size()) : 0;
  comm.broadcast(std::span<std::int64_t>(&length, 1), root);
  std::string out = comm.rank() == root ? text : std::string(static_cast<std::size_t>(length), '\0');
  comm.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size()),
                 root);
  return out;
}

}  // namespace mpitrain::checkpoint
