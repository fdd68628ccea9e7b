# Installs the library (versioned SONAME), its public headers under include/mpitrain/<module>/
# (every header of a module except those in a detail/ folder, which are implementation-only)
# and the umbrella header include/mpitrain/mpitrain.hpp,
# the command-line tools (trainer, benchmarks), a CMake package (find_package(mpitrain CONFIG)
# -> mpitrain::mpitrain) and a pkg-config file (mpitrain.pc). Both package files are
# relocatable: `cmake --install <build> --prefix <anywhere>` gives working files. The
# pkg-config file links with a run path to its libdir, so a program built with it runs without
# LD_LIBRARY_PATH. LICENSE goes to the documentation folder.
# tests/packaging/ installs into a fresh prefix and builds an outside project against it.
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

# The public headers are C++20; consumers of the installed target compile as C++20 too.
target_compile_features(mpitrain PUBLIC cxx_std_20)

install(TARGETS mpitrain EXPORT mpitrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# MPITRAIN_PUBLIC_HEADERS: the installed headers, as paths relative to the source root
# ("engine/engine.hpp"). A header under any detail/ folder, at any depth, is not public.
set(MPITRAIN_PUBLIC_HEADERS)
foreach(module IN LISTS MPITRAIN_MODULES)
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/${module}/*.hpp)
  list(FILTER headers EXCLUDE REGEX "(^|/)detail/")
  list(APPEND MPITRAIN_PUBLIC_HEADERS ${headers})
endforeach()
foreach(header IN LISTS MPITRAIN_PUBLIC_HEADERS)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mpitrain/${folder})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/mpitrain.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mpitrain)

# The tools are defined in apps/ and benchmarks/, which the top-level CMakeLists.txt adds
# after including this file; so the rule runs at the end of the top-level directory, and
# installs those of them that this configuration builds.
set(MPITRAIN_TOOLS trainer collective_bench train_bench checkpoint_bench nn_bench)
function(mpitrain_install_tools)
  foreach(tool IN LISTS MPITRAIN_TOOLS)
    if(TARGET ${tool})
      install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL mpitrain_install_tools)

set(MPITRAIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpitrain)
install(EXPORT mpitrainTargets NAMESPACE mpitrain:: DESTINATION ${MPITRAIN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mpitrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mpitrainConfig.cmake INSTALL_DESTINATION ${MPITRAIN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mpitrainConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mpitrainConfig.cmake
              ${PROJECT_BINARY_DIR}/mpitrainConfigVersion.cmake
        DESTINATION ${MPITRAIN_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own location (${pcfiledir}), so the
# file stays right whatever --prefix the install used (unless a directory is absolute).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(MPITRAIN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH pc_to_prefix "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" pc_to_prefix "${pc_to_prefix}")
  set(MPITRAIN_PC_PREFIX "\${pcfiledir}/${pc_to_prefix}")
endif()
foreach(dir IN ITEMS LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(MPITRAIN_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(MPITRAIN_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/mpitrain.pc.in ${PROJECT_BINARY_DIR}/mpitrain.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/mpitrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# The license (Apache-2.0, named in both package files too).
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
