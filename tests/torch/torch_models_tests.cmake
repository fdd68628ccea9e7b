# Tests of libtorch models trained through mpitrain::torch against PyTorch (issue 19), included
# by tests/torch/CMakeLists.txt (which exists only when the component is built). Label torch.

# torch.reference: 20 AdamW steps of the CNN, the CNN with BatchNorm and the tied-weight model
# at 2 ranks x 32 and 1 rank x 64 equal the same training in Python torch
# (reference_training.py) within 1e-5 by max|a-b| / max|b| (reference_test.py prints each).
add_executable(torch_reference_train ${CMAKE_CURRENT_LIST_DIR}/torch_reference_train.cpp)
target_link_libraries(torch_reference_train PRIVATE mpitrain::torch)
target_compile_options(torch_reference_train PRIVATE ${MPITRAIN_WARNINGS})
add_test(NAME torch.reference
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/reference_test.py
          --trainer $<TARGET_FILE:torch_reference_train> --mpiexec ${MPIEXEC_EXECUTABLE}
          --workdir ${CMAKE_CURRENT_BINARY_DIR}/reference_runs)
set_tests_properties(torch.reference PROPERTIES
  ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV}" TIMEOUT 600 PROCESSORS 2 LABELS "torch;mpi")

# torch.precision_accuracy: bf16 autocast and fp16 loss scaling within 1 point of fp32's
# test accuracy (the CNN, 2 ranks x 64, 300 steps).
add_executable(torch_precision_accuracy ${CMAKE_CURRENT_LIST_DIR}/torch_precision_accuracy.cpp)
target_link_libraries(torch_precision_accuracy PRIVATE mpitrain::torch)
target_compile_options(torch_precision_accuracy PRIVATE ${MPITRAIN_WARNINGS})
add_test(NAME torch.precision_accuracy.np2
  COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 --oversubscribe ${MPIEXEC_PREFLAGS}
          $<TARGET_FILE:torch_precision_accuracy> ${MPIEXEC_POSTFLAGS} 300)
set_tests_properties(torch.precision_accuracy.np2 PROPERTIES
  ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV}" TIMEOUT 900 PROCESSORS 2 LABELS "torch;mpi")

# torch.libtorch_bench.smoke: the benchmark's driver runs its five implementations (PyTorch
# DDP gloo, the hand-written allreduce, mpitrain with its defaults, overlap off, torch's AdamW
# step) for a few steps and prints its table; the figures of a smoke run mean nothing.
if(TARGET libtorch_mpitrain_bench AND TARGET libtorch_allreduce_bench)
  add_test(NAME torch.libtorch_bench.smoke
    COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/benchmarks/libtorch_ddp/run_libtorch_bench.py
            --build ${PROJECT_BINARY_DIR} --mpiexec ${MPIEXEC_EXECUTABLE} --rounds 1 --warmup 2 --steps 5)
  set_tests_properties(torch.libtorch_bench.smoke PROPERTIES
    ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV}" TIMEOUT 300 PROCESSORS 2 LABELS "torch;mpi;benchmarks"
    PASS_REGULAR_EXPRESSION "mpitrain \\(defaults\\) vs PyTorch DDP gloo")
endif()

# torch.libtorch_bench.torchscript_smoke: the driver's --torchscript mode runs the TorchScript
# CNN and GPT of models/ at 1 and 2 ranks, mpitrain (libtorch_torchscript_bench) and PyTorch
# DDP gloo (ddp_gloo.py --torchscript), a few steps each, and prints its table (about 25 s);
# the figures of a smoke run mean nothing.
if(TARGET libtorch_torchscript_bench)
  add_test(NAME torch.libtorch_bench.torchscript_smoke
    COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/benchmarks/libtorch_ddp/run_libtorch_bench.py
            --build ${PROJECT_BINARY_DIR} --mpiexec ${MPIEXEC_EXECUTABLE} --torchscript --rounds 1 --warmup 1
            --steps 2)
  set_tests_properties(torch.libtorch_bench.torchscript_smoke PROPERTIES
    ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV}" TIMEOUT 300 PROCESSORS 2 LABELS "torch;mpi;benchmarks"
    PASS_REGULAR_EXPRESSION "fortunes_gpt +2 +mpitrain +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+")
endif()
