# Exact resume across processes: each run is a fresh MPI job of resume_worker.
#   cmake -DLAUNCH="mpiexec;-n" -DWORKER=<exe> -DWORK=<dir> -DNP_FIRST=<n> -DNP_RESUME=<m>
#         -DSTEPS_FIRST=<s> -DSTEPS=<t> -P resume_test.cmake
# 1. (NP_FIRST == NP_RESUME only) straight: t steps from scratch;
# 2. first: s steps, save_state() in the middle of an epoch;
# 3. resume: load_state() in a new job of NP_RESUME ranks, train until t steps.
# Same world size: every rank's lines of steps 1..t and its final parameters must be bitwise
# equal to the straight run's. Other world size (N -> M): the loaded parameters must equal the
# saved ones, the world-size warning must be printed, and training must continue to t steps.

function(run_worker np mode steps project out)
  execute_process(
    COMMAND ${LAUNCH} ${np} --oversubscribe ${WORKER} --mode ${mode} --steps ${steps}
            --project ${project} --out ${out}
    RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  message("[${mode}, ${np} ranks] exit ${rc}\n${stdout}${stderr}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "resume_worker --mode ${mode} on ${np} ranks failed (exit ${rc})")
  endif()
  set(worker_output "${stdout}${stderr}" PARENT_SCOPE)
endfunction()

# Returns in `var` the lines of `file` that match `regex`.
function(lines_of file regex var)
  file(STRINGS ${file} all)
  set(kept)
  foreach(line IN LISTS all)
    if(line MATCHES "${regex}")
      list(APPEND kept "${line}")
    endif()
  endforeach()
  set(${var} "${kept}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(exact OFF)
if(NP_FIRST EQUAL NP_RESUME)
  set(exact ON)
  run_worker(${NP_FIRST} straight ${STEPS} ${WORK}/straight ${WORK}/straight)
endif()
run_worker(${NP_FIRST} first ${STEPS_FIRST} ${WORK}/run ${WORK}/first)
run_worker(${NP_RESUME} resume ${STEPS} ${WORK}/run ${WORK}/resume)
if(NOT exact AND NOT worker_output MATCHES "saved by ${NP_FIRST} ranks and is loaded by ${NP_RESUME}")
  message(FATAL_ERROR "the N -> M load did not warn about the world size")
endif()

lines_of(${WORK}/first.rank0 "^saved " saved)
string(REGEX REPLACE "^saved ([0-9a-f]+) .*" "\\1" saved_hash "${saved}")
math(EXPR last_rank "${NP_RESUME} - 1")
foreach(r RANGE ${last_rank})
  lines_of(${WORK}/resume.rank${r} "^loaded " loaded)
  if(NOT loaded STREQUAL "loaded ${saved_hash}")
    message(FATAL_ERROR "rank ${r}: parameters after load_state (${loaded}) differ from those saved (${saved_hash})")
  endif()
  lines_of(${WORK}/resume.rank${r} "^(step|final) " resumed)
  if(exact)
    lines_of(${WORK}/straight.rank${r} "^(step|final) " expected)
    lines_of(${WORK}/first.rank${r} "^step " first)
    set(actual ${first} ${resumed})
    list(LENGTH expected n_expected)
    list(LENGTH actual n_actual)
    if(NOT n_expected EQUAL n_actual)
      message(FATAL_ERROR "rank ${r}: ${n_actual} lines after resuming, ${n_expected} straight")
    endif()
    math(EXPR last "${n_expected} - 1")
    foreach(i RANGE ${last})
      list(GET expected ${i} e)
      list(GET actual ${i} a)
      if(NOT e STREQUAL a)
        message(FATAL_ERROR "rank ${r}: resumed run differs from the straight run\n  straight: ${e}\n  resumed:  ${a}")
      endif()
    endforeach()
    message("rank ${r}: ${n_expected} lines bitwise equal to the straight run")
  else()
    math(EXPR first_resumed "${STEPS_FIRST} + 1")
    list(GET resumed 0 head)
    if(NOT head MATCHES "^step ${first_resumed} ")
      message(FATAL_ERROR "rank ${r}: the resumed run starts with '${head}', not step ${first_resumed}")
    endif()
    list(GET resumed -1 tail)
    if(NOT tail MATCHES "^final .* counter ${STEPS} ")
      message(FATAL_ERROR "rank ${r}: the resumed run ends with '${tail}'")
    endif()
  endif()
endforeach()
