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
