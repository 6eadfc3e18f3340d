# Install rules of the C++ package: public headers, libraries, the `iser` CLI, the bundled data and
# a CMake package, so that another project writes
#
#   find_package(iser REQUIRED)
#   target_link_libraries(app PRIVATE iser::core)      # or iser::cuda / iser::runtime / iser::moe
#
# Exported targets, one library per layer (cmake/layers.cmake): iser::core (pure C++, always);
# where the CUDA part was built, iser::cuda (kernels, GPU planner), iser::runtime (communicator,
# symmetric memory, replication) and iser::moe (reference EP MoE layer), each linking the layers
# below it. The GPU benchmarks (bench/moe) are not installed.
include(CMakePackageConfigHelpers)

set(ISER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/iser" CACHE STRING
    "Where iserConfig.cmake is installed, relative to the prefix")
set(iser_export_targets iser_core)
set(iser_installed_headers ${ISER_CORE_HEADERS})
if(ISER_WITH_CUDA)
  list(APPEND iser_export_targets iser_cuda iser_runtime iser_moe)
  list(APPEND iser_installed_headers ${ISER_CUDA_HEADERS} ${ISER_RUNTIME_HEADERS}
              ${ISER_MOE_HEADERS})
endif()
list(FILTER iser_installed_headers EXCLUDE REGEX "^testing/")  # testing-only, not installed
list(TRANSFORM iser_installed_headers PREPEND ${PROJECT_SOURCE_DIR}/include/iser/)
install(FILES ${iser_installed_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/iser)

install(TARGETS ${iser_export_targets} EXPORT iserTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS iser RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# bundled_default_trace() finds <prefix>/share/iser/data from <prefix>/bin/iser.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/data/ DESTINATION ${CMAKE_INSTALL_DATADIR}/iser/data)

install(EXPORT iserTargets NAMESPACE iser:: DESTINATION ${ISER_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/iserConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/iserConfig.cmake
                              INSTALL_DESTINATION ${ISER_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/iserConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/iserConfig.cmake ${PROJECT_BINARY_DIR}/iserConfigVersion.cmake
        DESTINATION ${ISER_INSTALL_CMAKEDIR})
