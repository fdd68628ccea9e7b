# cmake -DCOMMAND="a;b;c" -DEXPECT_RC=0|nonzero [-DEXPECT_REGEX=...] [-DREJECT_REGEX=...]
#       -P expect_output.cmake
# Passes when COMMAND exits with 0 (EXPECT_RC=0) or anything else (EXPECT_RC=nonzero), its
# combined output matches EXPECT_REGEX (when given) and does not match REJECT_REGEX (when
# given).
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(EXPECT_RC STREQUAL "0" AND NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit code 0, got ${rc}")
elseif(EXPECT_RC STREQUAL "nonzero" AND rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit code, got 0")
elseif(NOT EXPECT_RC MATCHES "^(0|nonzero)$")
  message(FATAL_ERROR "EXPECT_RC must be 0 or nonzero, not '${EXPECT_RC}'")
endif()
if(DEFINED EXPECT_REGEX AND NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match: ${EXPECT_REGEX}")
endif()
if(DEFINED REJECT_REGEX AND "${out}${err}" MATCHES "${REJECT_REGEX}")
  message(FATAL_ERROR "output matches what it must not: ${REJECT_REGEX}")
endif()
