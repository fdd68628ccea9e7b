# Installs the library (versioned SONAME), its public headers under include/mpitrain/<module>/,
# a CMake package (find_package(mpitrain CONFIG) -> mpitrain::mpitrain) and a pkg-config file.
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)

install(TARGETS mpitrain EXPORT mpitrainTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(module IN LISTS MPITRAIN_MODULES)
  file(GLOB headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${module}/*.hpp)
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mpitrain/${module})
endforeach()

set(MPITRAIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpitrain)
install(EXPORT mpitrainTargets NAMESPACE mpitrain:: DESTINATION ${MPITRAIN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mpitrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mpitrainConfig.cmake INSTALL_DESTINATION ${MPITRAIN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mpitrainConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mpitrainConfig.cmake
              ${PROJECT_BINARY_DIR}/mpitrainConfigVersion.cmake
        DESTINATION ${MPITRAIN_CMAKE_DIR})
configure_file(${PROJECT_SOURCE_DIR}/cmake/mpitrain.pc.in ${PROJECT_BINARY_DIR}/mpitrain.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/mpitrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
