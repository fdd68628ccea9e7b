# Helpers that register GoogleTest binaries with CTest, at one or more MPI world sizes.
include_guard(GLOBAL)
find_package(GTest REQUIRED)

# Open MPI refuses to run as root unless told; set those variables only when we are root.
execute_process(COMMAND id -u OUTPUT_VARIABLE MPITRAIN_UID OUTPUT_STRIP_TRAILING_WHITESPACE)
set(MPITRAIN_MPI_TEST_ENV "OMPI_MCA_rmaps_base_oversubscribe=1")
if(MPITRAIN_UID STREQUAL "0")
  list(APPEND MPITRAIN_MPI_TEST_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
endif()

# Sanitizer builds (cmake/MpitrainSanitize.cmake): every test runs with the sanitizers'
# options and the suppressions of tests/sanitize, which name only races inside Open MPI and
# its libraries (never ours). Child processes of mpiexec inherit the environment. Leak
# detection is off: Open MPI unloads its components (dlclose) at MPI_Finalize, so the blocks
# they keep show up as leaks from "<unknown module>" that no suppression can name; the
# fuzzers (no MPI) check for leaks. allocator_may_return_null: tests that ask for an
# impossible size expect std::bad_alloc, as from the real allocator, not ASan's abort.
if(MPITRAIN_SANITIZE)
  set(MPITRAIN_SANITIZER_SUPPRESSIONS ${PROJECT_SOURCE_DIR}/tests/sanitize)
  list(APPEND MPITRAIN_MPI_TEST_ENV
    "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:check_initialization_order=1"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
    "TSAN_OPTIONS=suppressions=${MPITRAIN_SANITIZER_SUPPRESSIONS}/tsan.supp:halt_on_error=1:second_deadlock_stack=1")
endif()

set(MPITRAIN_TEST_TIMEOUT 600 CACHE STRING "Seconds before CTest kills one test run")

# A binary whose tests were all skipped (GTEST_SKIP) on every rank, none failed, is reported
# as skipped: the test main (tests/support/mpi_test_main.cpp) then ends with this line. Not
# GoogleTest's per-test "[  SKIPPED ]" lines: CTest marks a test skipped when its output
# matches, whatever its exit code, so one skipped test would hide the binary's failures (and
# its passes). A binary with some tests skipped and others passed shows as passed; its output
# lists the skipped ones.
set(MPITRAIN_SKIP_REGEX "\\[  SKIPPED \\] every test of this run was skipped")

# mpitrain_add_mpi_test(<name> SOURCES <files...> [RANKS 1 2 3 4] [LIBRARIES <libs...>]
#                       [LABELS <labels...>])
# Builds <name> from SOURCES with the MPI GoogleTest main and registers it as
# <name>.np<K> for each K in RANKS (default 1 2 3 4), run under mpiexec -n K.
function(mpitrain_add_mpi_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;RANKS;LIBRARIES;LABELS" ${ARGN})
  if(NOT ARG_RANKS)
    set(ARG_RANKS 1 2 3 4)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE mpitrain_test_main mpitrain::mpitrain ${ARG_LIBRARIES})
  target_compile_options(${name} PRIVATE ${MPITRAIN_WARNINGS})
  foreach(np IN LISTS ARG_RANKS)
    add_test(NAME ${name}.np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${np} PROPERTIES
      ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV}"
      TIMEOUT ${MPITRAIN_TEST_TIMEOUT}
      SKIP_REGULAR_EXPRESSION "${MPITRAIN_SKIP_REGEX}"
      PROCESSORS ${np}
      LABELS "mpi;${ARG_LABELS}")
  endforeach()
endfunction()

# mpitrain_add_test(<name> SOURCES <files...> [LIBRARIES <libs...>])
# A single-process GoogleTest binary (no MPI launch), registered as <name>.
function(mpitrain_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE mpitrain_test_main mpitrain::mpitrain ${ARG_LIBRARIES})
  target_compile_options(${name} PRIVATE ${MPITRAIN_WARNINGS})
  add_test(NAME ${name} COMMAND $<TARGET_FILE:${name}>)
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV}"
    TIMEOUT ${MPITRAIN_TEST_TIMEOUT}
    SKIP_REGULAR_EXPRESSION "${MPITRAIN_SKIP_REGEX}"
    LABELS "${ARG_LABELS}")
endfunction()

# ---- multi-node tests (label multinode) ----------------------------------------------------
# They run across simulated nodes on this machine: scripts/sim_cluster.sh brings up network
# namespaces with host names of their own (the fixture test multinode.up, tests/CMakeLists.txt)
# and removes them (multinode.down, run even when a test failed). The cluster's name derives
# from the build folder, so two build trees on one machine do not share (or remove) one
# cluster. A machine without namespace rights makes sim_cluster.sh exit 77 with the reason:
# the tests are reported as skipped, never passed.
set(MPITRAIN_SIM_CLUSTER ${PROJECT_SOURCE_DIR}/scripts/sim_cluster.sh)
string(MD5 MPITRAIN_SIM_CLUSTER_HASH "${PROJECT_BINARY_DIR}")
string(SUBSTRING "${MPITRAIN_SIM_CLUSTER_HASH}" 0 8 MPITRAIN_SIM_CLUSTER_HASH)
set(MPITRAIN_SIM_CLUSTER_NAME "mpitrain-ctest-${MPITRAIN_SIM_CLUSTER_HASH}")
# Four nodes: the 2 x 2 layout uses the first two, the 4 x 1 layout all of them.
set(MPITRAIN_SIM_CLUSTER_NODES 4)
set(MPITRAIN_SIM_CLUSTER_RATE 2gbit)

# mpitrain_add_multinode_test(<name> NODES <n> COMMAND <command...> [TIMEOUT <s>])
# Registers multinode.<name>: <command> run on node1 of the simulated cluster (with the
# environment mpirun needs to reach the other nodes), MPITRAIN_TEST_NODES=<n> set for it.
# Every multinode test runs 4 ranks (PROCESSORS 4).
function(mpitrain_add_multinode_test name)
  cmake_parse_arguments(ARG "" "NODES;TIMEOUT" "COMMAND" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME multinode.${name}
    COMMAND ${MPITRAIN_SIM_CLUSTER} run --name ${MPITRAIN_SIM_CLUSTER_NAME} -- ${ARG_COMMAND})
  set_tests_properties(multinode.${name} PROPERTIES
    ENVIRONMENT "${MPITRAIN_MPI_TEST_ENV};MPITRAIN_TEST_NODES=${ARG_NODES}"
    TIMEOUT ${ARG_TIMEOUT}
    FIXTURES_REQUIRED sim_cluster
    RESOURCE_LOCK sim_cluster
    SKIP_RETURN_CODE 77
    SKIP_REGULAR_EXPRESSION "${MPITRAIN_SKIP_REGEX}"
    PROCESSORS 4
    LABELS multinode)
endfunction()

# mpitrain_add_multinode_mpi_test(<target> [LAYOUT NxK] [NAME <name>] [ARGS <args...>])
# Registers an MPI GoogleTest binary built by mpitrain_add_mpi_test as multinode.<name>
# (default: the target's name, with .<layout> appended for layouts other than 2x2): N nodes x
# K ranks each (default 2x2), ranks placed node by node.
function(mpitrain_add_multinode_mpi_test target)
  cmake_parse_arguments(ARG "" "LAYOUT;NAME;TIMEOUT" "ARGS" ${ARGN})
  if(NOT ARG_LAYOUT)
    set(ARG_LAYOUT 2x2)
  endif()
  if(NOT ARG_NAME)
    set(ARG_NAME ${target})
    if(NOT ARG_LAYOUT STREQUAL "2x2")
      set(ARG_NAME ${target}.${ARG_LAYOUT})
    endif()
  endif()
  string(REPLACE "x" ";" layout ${ARG_LAYOUT})
  list(GET layout 0 nodes)
  list(GET layout 1 per_node)
  math(EXPR ranks "${nodes} * ${per_node}")
  set(hosts "")
  foreach(i RANGE 1 ${nodes})
    list(APPEND hosts "node${i}:${per_node}")
  endforeach()
  string(REPLACE ";" "," hosts "${hosts}")
  set(timeout_arg "")
  if(ARG_TIMEOUT)
    set(timeout_arg TIMEOUT ${ARG_TIMEOUT})
  endif()
  mpitrain_add_multinode_test(${ARG_NAME} NODES ${nodes} ${timeout_arg}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} --host ${hosts}
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${ARG_ARGS})
endfunction()
