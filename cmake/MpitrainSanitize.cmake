# Sanitizer and fuzzer builds (`make sanitize`, `make fuzz`, CI). Included before any target
# is defined, so every target of the build (library, apps, tests) is instrumented alike:
# mixing instrumented and plain code hides errors on the plain side. One exception: the test
# files (tests/) are built without UBSan's checks (MPITRAIN_TEST_SANITIZE_OPTIONS), which
# double what a GoogleTest file costs to compile (tests/engine/engine_test.cpp at -O1: 37 s,
# 19 s with ASan alone) for checks of the tests' own code and of the header code they
# instantiate; UBSan checks each file on its own, so the library's files keep every check
# (but for header code a test file also instantiates: a program keeps one copy of it, which
# may be the test's), and ASan stays everywhere.
#   -DMPITRAIN_SANITIZE=address,undefined   ASan + UBSan (any compiler)
#   -DMPITRAIN_SANITIZE=thread              TSan (the communication thread's tests)
# The libFuzzer harnesses are a project of their own (tests/fuzz, built with clang).
include_guard(GLOBAL)

set(MPITRAIN_SANITIZE "" CACHE STRING
    "Sanitizers for every target: address,undefined | thread | empty (none)")

if(MPITRAIN_SANITIZE)
  if(MPITRAIN_SANITIZE MATCHES "thread" AND MPITRAIN_SANITIZE MATCHES "address")
    message(FATAL_ERROR "MPITRAIN_SANITIZE=${MPITRAIN_SANITIZE}: TSan and ASan cannot be combined; "
                        "build them in two folders")
  endif()
  # Errors stop the process (no recovery) so a test fails instead of printing and passing;
  # frame pointers keep the reports' stacks whole in optimised code.
  add_compile_options(-fsanitize=${MPITRAIN_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${MPITRAIN_SANITIZE})
  if(MPITRAIN_SANITIZE MATCHES "undefined")
    set(MPITRAIN_TEST_SANITIZE_OPTIONS -fno-sanitize=undefined)
  endif()
endif()

