# cmake -DCOMMAND="a;b;c" -DEXPECT_RC=<code> -DEXPECT_REGEX=... -P expect_exit_code.cmake
# Passes when COMMAND exits with EXPECT_RC and its combined output matches EXPECT_REGEX.
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match: ${EXPECT_REGEX}")
endif()
