#pragma once
// The MPI thread level an Engine needs, checked when it is constructed.
//
// With overlap on, bucket reductions run on the engine's communication thread (CommStream)
// during backward (or on the backward thread itself when it may run on one CPU only:
// GradientSync's ReduceOn; the requirement does not depend on the machine), and every other
// collective on the thread that calls the engine while the stream is idle: MPI is called
// from two threads, never at once, so MPI_THREAD_SERIALIZED.
// With overlap off, every bucket is reduced synchronously on the calling thread after
// backward and the communication thread never calls MPI: MPI_THREAD_FUNNELED (call the engine
// from the thread that initialised MPI). A host program that initialised MPI at a lower level
// than its engine needs gets an error naming both levels instead of undefined behaviour.

#include "mpitrain/collectives/mpi_runtime.hpp"
#include "mpitrain/engine/engine_config.hpp"

namespace mpitrain {

// Returns the thread level an Engine with `config` needs (see above).
ThreadLevel required_thread_level(const EngineConfig& config) noexcept;

// Throws std::invalid_argument when `provided` is below required_thread_level(config),
// naming both levels and what to change; `rank` is the caller's rank.
void check_thread_level(const EngineConfig& config, ThreadLevel provided, int rank);

}  // namespace mpitrain
