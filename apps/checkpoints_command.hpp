#pragma once
// `trainer checkpoints list|verify DIR`: the committed checkpoints of a project (DIR is the
// project folder, its checkpoints/ folder, or one checkpoint folder), checkpoint_<N> and
// step_<S> alike (apps/checkpoint_folders.hpp), and a check of their files against the
// manifest (sizes and XXH3-128) without opening them with HDF5.
// Needs no MPI; the trainer runs it on rank 0 and gives the exit code to every rank. A
// folder that cannot be listed throws (std::filesystem_error or CheckpointError).

#include <cstdio>
#include <filesystem>

namespace mpitrain::app {

// Prints one line per committed checkpoint (number, step, epoch, world size, creation time,
// bytes) and names the uncommitted folders the next run will remove. Returns the exit code:
// 0, or 2 (bad usage) when DIR is not a folder.
int list_checkpoints_command(const std::filesystem::path& dir, std::FILE* out, std::FILE* err);
// Verifies one checkpoint folder, or every committed checkpoint under DIR. Returns 0 when
// all are intact, 1 when one is damaged (each damaged file is named) or there is none, 2
// (bad usage) when DIR is not a folder.
int verify_checkpoints_command(const std::filesystem::path& dir, std::FILE* out, std::FILE* err);

}  // namespace mpitrain::app
