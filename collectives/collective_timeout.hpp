#pragma once
// CollectiveTimeout, CollectiveMismatch and TimeoutAction: what a Communicator does when a
// rank waits too long for its peers, or when the ranks' collectives do not match
// (DESIGN.md section 2, "Deadlines and desynchronisation").
//
// A deadline (Communicator::set_timeout, EngineConfig::timeout_s, the trainer's
// distributed.timeout_s) bounds every wait for peers: MPI requests, the ring's messages,
// shared-memory spins, nonblocking Requests, and through them the CommStream worker. On
// expiry the rank reports, on stderr, what it waits in and which ranks did not arrive:
//   rank 0: allreduce(f32, 1024 elements) #57 timed out after 10 s: rank 1 did not arrive
//   (last seen at #56); arrived: rank 0
// then either ends the job (TimeoutAction::abort, the default: MPI_Abort once every peer
// that arrived has reported: at most 3 s later, 2 s for the peers and 1 s for their reports)
// or throws CollectiveTimeout with that text
// (TimeoutAction::throw_error; the communicator is unusable afterwards, and the program
// must end through Communicator::abort, since MPI_Finalize would wait for the missing rank).

#include <cstdint>
#include <stdexcept>
#include <string_view>

namespace mpitrain {

enum class TimeoutAction : std::uint8_t {
  abort,        // report on stderr, then MPI_Abort the job (exit code 1)
  throw_error,  // throw CollectiveTimeout on the rank that timed out
};

// Returns "abort" or "throw".
std::string_view to_string(TimeoutAction action) noexcept;
// Returns the action named `name` ("abort" or "throw"); throws std::invalid_argument listing
// the valid names.
TimeoutAction parse_timeout_action(std::string_view name);

// A wait for peers passed the communicator's deadline (TimeoutAction::throw_error); what()
// is the report quoted above.
class CollectiveTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The ranks issued different collectives: raised on every rank, with the same text, by
// Communicator::check_collectives() (fingerprints differ since the last check) and, in the
// debug mode, before the first collective that differs:
//   collective mismatch: rank 1 called allreduce(f32, 1024) #57 from Engine::backward,
//   rank 0 called barrier #57 from wait_for_everyone
class CollectiveMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace mpitrain
