#pragma once
// The umbrella header: every public header of every module of mpitrain, for users who
// would rather write one include than find the header of each concept:
//   #include <mpitrain/mpitrain.hpp>
// Code inside mpitrain includes the headers it uses, never this one (tests/layering_test.py).
// Headers in a detail/ folder are implementation-only and not listed. The packaging test
// (packaging.headers_self_contained) checks that this list is exactly the installed headers.

// precision/: number formats, conversion, loss scaling
#include <mpitrain/precision/all_finite.hpp>
#include <mpitrain/precision/bfloat16.hpp>
#include <mpitrain/precision/convert.hpp>
#include <mpitrain/precision/float16.hpp>
#include <mpitrain/precision/loss_scaler.hpp>
#include <mpitrain/precision/precision_mode.hpp>
#include <mpitrain/precision/simd_path.hpp>

// tensor/: Tensor, Shape, aligned storage, StateDict, NamedTensor
#include <mpitrain/tensor/aligned_storage.hpp>
#include <mpitrain/tensor/named_tensor.hpp>
#include <mpitrain/tensor/state_dict.hpp>
#include <mpitrain/tensor/tensor.hpp>

// collectives/: MPI runtime, Communicator, algorithm names and selection, CommStream,
// deadlines and collective checks
#include <mpitrain/collectives/algorithm_selection.hpp>
#include <mpitrain/collectives/collective.hpp>
#include <mpitrain/collectives/collective_timeout.hpp>
#include <mpitrain/collectives/comm_stream.hpp>
#include <mpitrain/collectives/communicator.hpp>
#include <mpitrain/collectives/dtype.hpp>
#include <mpitrain/collectives/mpi_error.hpp>
#include <mpitrain/collectives/mpi_runtime.hpp>
#include <mpitrain/collectives/request.hpp>
#include <mpitrain/collectives/shared_buffer.hpp>

// nn/: modules, layers, losses, optimizers, schedulers
#include <mpitrain/nn/activation.hpp>
#include <mpitrain/nn/adamw.hpp>
#include <mpitrain/nn/blas_threads.hpp>
#include <mpitrain/nn/cross_entropy_loss.hpp>
#include <mpitrain/nn/dropout.hpp>
#include <mpitrain/nn/fast_math.hpp>
#include <mpitrain/nn/gelu.hpp>
#include <mpitrain/nn/gemm.hpp>
#include <mpitrain/nn/init.hpp>
#include <mpitrain/nn/layer_norm.hpp>
#include <mpitrain/nn/linear.hpp>
#include <mpitrain/nn/loss_result.hpp>
#include <mpitrain/nn/lr_scheduler.hpp>
#include <mpitrain/nn/mlp.hpp>
#include <mpitrain/nn/module.hpp>
#include <mpitrain/nn/mse_loss.hpp>
#include <mpitrain/nn/optimizer.hpp>
#include <mpitrain/nn/parameter.hpp>
#include <mpitrain/nn/relu.hpp>
#include <mpitrain/nn/rng.hpp>
#include <mpitrain/nn/sequential.hpp>
#include <mpitrain/nn/sgd.hpp>
#include <mpitrain/nn/tanh.hpp>

// data/: datasets, sampler, loader
#include <mpitrain/data/batch_sharding.hpp>
#include <mpitrain/data/data_loader.hpp>
#include <mpitrain/data/dataset.hpp>
#include <mpitrain/data/distributed_sampler.hpp>
#include <mpitrain/data/hdf5_dataset.hpp>
#include <mpitrain/data/idx_dataset.hpp>
#include <mpitrain/data/mapped_file.hpp>
#include <mpitrain/data/synthetic_dataset.hpp>
#include <mpitrain/data/text_dataset.hpp>
#include <mpitrain/data/token_sequence.hpp>
#include <mpitrain/data/token_shard.hpp>
#include <mpitrain/data/token_windows.hpp>
#include <mpitrain/data/torch_randperm.hpp>

// checkpoint/: checkpoint files, manifest, CheckpointManager, save_model
#include <mpitrain/checkpoint/checkpoint_error.hpp>
#include <mpitrain/checkpoint/checkpoint_layout.hpp>
#include <mpitrain/checkpoint/checkpoint_manager.hpp>
#include <mpitrain/checkpoint/checkpoint_state.hpp>
#include <mpitrain/checkpoint/checkpointable.hpp>
#include <mpitrain/checkpoint/checkpointable_snapshot.hpp>
#include <mpitrain/checkpoint/durable_io.hpp>
#include <mpitrain/checkpoint/file_hash.hpp>
#include <mpitrain/checkpoint/fletcher32.hpp>
#include <mpitrain/checkpoint/h5_file.hpp>
#include <mpitrain/checkpoint/load_model.hpp>
#include <mpitrain/checkpoint/manifest.hpp>
#include <mpitrain/checkpoint/rank_agreement.hpp>
#include <mpitrain/checkpoint/safetensors.hpp>
#include <mpitrain/checkpoint/save_model.hpp>
#include <mpitrain/checkpoint/state_file.hpp>
#include <mpitrain/checkpoint/state_group.hpp>

// engine/: Engine, GradientSync, EngineConfig
#include <mpitrain/engine/cores_of_this_thread.hpp>
#include <mpitrain/engine/engine.hpp>
#include <mpitrain/engine/engine_config.hpp>
#include <mpitrain/engine/engine_phase.hpp>
#include <mpitrain/engine/gradient_sync.hpp>
#include <mpitrain/engine/model_weights.hpp>
#include <mpitrain/engine/thread_level_requirement.hpp>
