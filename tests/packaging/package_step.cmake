# One step of the packaging test, run as `cmake -DSTEP=<step> ... -P package_step.cmake`:
#   STEP=install       installs BUILD_DIR into a fresh PREFIX and checks what it holds: the
#                      headers under include/mpitrain/<module>/ and no path with a detail/
#                      folder (implementation-only headers are not installed), the umbrella
#                      header, libmpitrain.so with its versioned SONAME, the TOOLS in bin/,
#                      the CMake package (naming its license), mpitrain.pc, LICENSE in DOCDIR
#   STEP=headers       compiles each installed header of PREFIX on its own (one translation
#                      unit that includes only it, with CXX and the pkg-config flags), then
#                      the umbrella header, and checks that the umbrella includes exactly the
#                      installed headers; a header that forgets an include fails
#   STEP=find_package  configures and builds the outside project CONSUMER_DIR against PREFIX
#                      with find_package(mpitrain CONFIG [COMPONENTS ...]), building SOURCE
#                      into WORK_DIR/OUTPUT (default consumer_find_package)
#   STEP=pkg_config    compiles SOURCE with CXX and `pkg-config --cflags --libs mpitrain`
#                      from PREFIX alone (no flag of its own: the rpath comes from the
#                      package), into WORK_DIR/OUTPUT (default consumer_pkg_config); checks
#                      Requires: ompi-c and the license
# Each failure names the step, the command and its output.
cmake_minimum_required(VERSION 3.25)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "packaging (${STEP}): ${what} failed (exit ${rc})\n  ${command}\n${out}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(expect_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "packaging (${STEP}): the install lacks ${path}")
  endif()
endfunction()

if(NOT IS_ABSOLUTE "${PREFIX}" OR PREFIX MATCHES "^/+$")
  message(FATAL_ERROR "package_step.cmake: PREFIX must be an absolute folder of its own, not '${PREFIX}'")
endif()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}")

  foreach(module IN LISTS MODULES)
    file(GLOB headers "${PREFIX}/${INCLUDEDIR}/mpitrain/${module}/*.hpp")
    if(NOT headers)
      message(FATAL_ERROR "packaging (install): no headers in ${PREFIX}/${INCLUDEDIR}/mpitrain/${module}/")
    endif()
  endforeach()
  expect_file("${PREFIX}/${INCLUDEDIR}/mpitrain/engine/engine.hpp")
  expect_file("${PREFIX}/${INCLUDEDIR}/mpitrain/mpitrain.hpp")
  file(GLOB_RECURSE installed LIST_DIRECTORIES true "${PREFIX}/*")
  list(FILTER installed INCLUDE REGEX "/detail(/|$)")
  if(installed)
    list(JOIN installed "\n  " listing)
    message(FATAL_ERROR "packaging (install): implementation-only detail/ paths were "
                        "installed:\n  ${listing}")
  endif()

  # libmpitrain.so -> libmpitrain.so.<major> -> libmpitrain.so.<version>; SONAME .so.<major>
  set(lib "${PREFIX}/${LIBDIR}/libmpitrain.so")
  expect_file("${lib}")
  expect_file("${lib}.${VERSION_MAJOR}")
  expect_file("${lib}.${VERSION}")
  run("readelf" readelf -d "${lib}.${VERSION}")
  if(NOT run_output MATCHES "\\(SONAME\\)[^\n]*\\[libmpitrain\\.so\\.${VERSION_MAJOR}\\]")
    message(FATAL_ERROR "packaging (install): SONAME of ${lib}.${VERSION} is not "
                        "libmpitrain.so.${VERSION_MAJOR}:\n${run_output}")
  endif()

  foreach(tool IN LISTS TOOLS)
    expect_file("${PREFIX}/${BINDIR}/${tool}")
  endforeach()
  expect_file("${PREFIX}/${LIBDIR}/cmake/mpitrain/mpitrainConfig.cmake")
  expect_file("${PREFIX}/${LIBDIR}/cmake/mpitrain/mpitrainConfigVersion.cmake")
  expect_file("${PREFIX}/${LIBDIR}/cmake/mpitrain/mpitrainTargets.cmake")
  expect_file("${PREFIX}/${LIBDIR}/pkgconfig/mpitrain.pc")
  expect_file("${PREFIX}/${DOCDIR}/LICENSE")
  file(STRINGS "${PREFIX}/${LIBDIR}/cmake/mpitrain/mpitrainConfig.cmake" license
       REGEX "set\\(mpitrain_LICENSE ")
  if(NOT license STREQUAL "set(mpitrain_LICENSE \"Apache-2.0\")")
    message(FATAL_ERROR "packaging (install): mpitrainConfig.cmake names no license Apache-2.0")
  endif()
  message(STATUS "installed into ${PREFIX}: headers of ${MODULES}, libmpitrain.so.${VERSION} "
                 "(SONAME libmpitrain.so.${VERSION_MAJOR}), tools ${TOOLS}, CMake package, pkg-config file")

elseif(STEP STREQUAL "find_package")
  if(NOT DEFINED OUTPUT)
    set(OUTPUT consumer_find_package)
  endif()
  set(build "${WORK_DIR}/${OUTPUT}_build")
  file(REMOVE_RECURSE "${build}")
  # Only the prefix is given: everything else must come from the package.
  run("configuring the consumer" ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${build}"
      -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_PREFIX_PATH=${PREFIX}" "-DCONSUMER_SOURCE=${SOURCE}"
      "-DCONSUMER_COMPONENTS=${COMPONENTS}")
  message(STATUS "${run_output}")
  if(NOT run_output MATCHES "mpitrain [0-9.]+ from ${PREFIX}/")
    message(FATAL_ERROR "packaging (find_package): mpitrain was not found in ${PREFIX}:\n${run_output}")
  endif()
  run("building the consumer" ${CMAKE_COMMAND} --build "${build}")
  file(COPY_FILE "${build}/consumer" "${WORK_DIR}/${OUTPUT}")

elseif(STEP STREQUAL "pkg_config")
  # Only this prefix's pkg-config files, plus the system's (for ompi-cxx, hdf5, yaml-cpp).
  set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
  run("pkg-config" pkg-config --cflags --libs mpitrain)
  string(STRIP "${run_output}" flags)
  message(STATUS "pkg-config --cflags --libs mpitrain: ${flags}")
  run("pkg-config" pkg-config --variable=libdir mpitrain)
  string(STRIP "${run_output}" libdir)
  file(REAL_PATH "${libdir}" libdir)
  file(REAL_PATH "${PREFIX}/${LIBDIR}" expected_libdir)
  if(NOT libdir STREQUAL expected_libdir)
    message(FATAL_ERROR "packaging (pkg_config): libdir is ${libdir}, expected ${expected_libdir}")
  endif()
  # The package carries its run path (so the consumer runs with a clean environment, see
  # packaging.run_pkg_config.np2) and requires the C MPI package, not the deprecated C++
  # bindings (-lmpi_cxx).
  if(NOT flags MATCHES "-Wl,-rpath,[^ ]*/${LIBDIR}( |$)")
    message(FATAL_ERROR "packaging (pkg_config): the flags carry no -Wl,-rpath,<libdir>: ${flags}")
  endif()
  if(flags MATCHES "-lmpi_cxx")
    message(FATAL_ERROR "packaging (pkg_config): the flags link the deprecated -lmpi_cxx: ${flags}")
  endif()
  run("pkg-config" pkg-config --print-requires mpitrain)
  string(STRIP "${run_output}" requires)
  if(NOT requires STREQUAL "ompi-c")
    message(FATAL_ERROR "packaging (pkg_config): Requires is '${requires}', expected 'ompi-c'")
  endif()
  file(STRINGS "${PREFIX}/${LIBDIR}/pkgconfig/mpitrain.pc" license REGEX "^License: ")
  if(NOT license STREQUAL "License: Apache-2.0")
    message(FATAL_ERROR "packaging (pkg_config): mpitrain.pc names no license Apache-2.0 ('${license}')")
  endif()
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
  # Nothing but the package's flags: no rpath of the test's own.
  if(NOT OUTPUT)
    set(OUTPUT consumer_pkg_config)
  endif()
  run("compiling with the pkg-config flags" ${CXX} -O2 -Wall -Wextra -Wpedantic -Werror
      "${SOURCE}" -o "${WORK_DIR}/${OUTPUT}" ${flag_list})

elseif(STEP STREQUAL "headers")
  set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
  run("pkg-config" pkg-config --cflags mpitrain)
  separate_arguments(pc_flags UNIX_COMMAND "${run_output}")
  set(include_root "${PREFIX}/${INCLUDEDIR}")
  # Other packages' folders (Open MPI's) as system headers, as find_package users get them:
  # the check is about mpitrain's headers, not about Open MPI's under -Wextra.
  file(REAL_PATH "${include_root}" real_include_root)
  set(flag_list)
  foreach(flag IN LISTS pc_flags)
    set(folder "")
    if(flag MATCHES "^-I(.+)$")
      file(REAL_PATH "${CMAKE_MATCH_1}" folder)
    endif()
    if(folder AND NOT folder STREQUAL real_include_root)
      list(APPEND flag_list -isystem "${folder}")
    else()
      list(APPEND flag_list "${flag}")
    endif()
  endforeach()
  file(GLOB_RECURSE headers RELATIVE "${include_root}" "${include_root}/mpitrain/*.hpp")
  list(FILTER headers EXCLUDE REGEX "(^|/)detail/")
  # The libtorch component's headers need libtorch's flags, and the umbrella header is the
  # core's: packaging.find_package_torch compiles them, through mpi_examples/libtorch_ddp.cpp.
  list(FILTER headers EXCLUDE REGEX "^mpitrain/torch/")
  list(REMOVE_ITEM headers "mpitrain/mpitrain.hpp")
  list(SORT headers)
  if(NOT headers)
    message(FATAL_ERROR "packaging (headers): no headers under ${include_root}/mpitrain/")
  endif()
  file(MAKE_DIRECTORY "${WORK_DIR}/headers")
  # Two compilers at a time (the test holds 2 processors): execute_process runs its COMMANDs
  # concurrently (as a pipeline, which -fsyntax-only neither writes to nor reads from), and
  # RESULTS_VARIABLE gives each one's exit code.
  set(compile ${CXX} -fsyntax-only -Wall -Wextra -Wpedantic -Werror ${flag_list})
  list(JOIN compile " " compile_text)
  set(pending ${headers} "mpitrain/mpitrain.hpp")
  while(pending)
    set(batch)
    set(commands)
    foreach(slot RANGE 1)
      if(pending)
        list(POP_FRONT pending header)
        set(unit "${WORK_DIR}/headers/include_one_${slot}.cpp")
        file(WRITE "${unit}" "#include <${header}>\n")
        list(APPEND batch "${header}")
        list(APPEND commands COMMAND ${compile} "${unit}")
      endif()
    endforeach()
    execute_process(${commands} RESULTS_VARIABLE results OUTPUT_VARIABLE out ERROR_VARIABLE out)
    foreach(header result IN ZIP_LISTS batch results)
      if(NOT result EQUAL 0)
        message(FATAL_ERROR "packaging (headers): compiling ${header} on its own failed (exit ${result}) "
                            "with ${compile_text}\n${out}")
      endif()
    endforeach()
  endwhile()

  file(STRINGS "${include_root}/mpitrain/mpitrain.hpp" umbrella_lines
       REGEX "^#include <mpitrain/.*>")
  list(TRANSFORM umbrella_lines REPLACE "^#include <(.*)>.*" "\\1")
  set(missing ${headers})
  list(REMOVE_ITEM missing ${umbrella_lines})
  set(extra ${umbrella_lines})
  list(REMOVE_ITEM extra ${headers})
  if(missing OR extra)
    message(FATAL_ERROR "packaging (headers): mpitrain.hpp must include exactly the installed "
                        "headers; it lacks [${missing}] and includes uninstalled [${extra}]")
  endif()
  list(LENGTH headers count)
  message(STATUS "each of ${count} installed headers and mpitrain/mpitrain.hpp compiles on its "
                 "own; the umbrella includes all of them")

else()
  message(FATAL_ERROR "package_step.cmake: unknown STEP '${STEP}'")
endif()
