# Install rules of the C++ package: public headers, libraries, the `iser` CLI, the bundled data and
# a CMake package, so that another project writes
#
#   find_package(iser REQUIRED)
#   target_link_libraries(app PRIVATE iser::core)      # or iser::cuda / iser::runtime / iser::moe
#
# Exported targets: iser::core (pure C++, always); where the CUDA part was built, iser::cuda
# (kernels, GPU planner), iser::runtime (communicator, symmetric memory, replication) and
# iser::moe (reference EP MoE layer). The CUDA part is one library today (iser::gpu); the three
# layer targets are stable names that link it, so consumers keep their link lines when the
# library is split per layer.
include(CMakePackageConfigHelpers)

set(ISER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/iser" CACHE STRING
    "Where iserConfig.cmake is installed, relative to the prefix")
set(iser_export_targets iser_core)

# Headers of the CUDA part (installed only with it); the benchmark entry points (moe_bench.h)
# are not public API.
set(iser_cuda_headers gpu_planner.h runtime.h moe.h moe_layer.h moe_ep_layer.h moe_ep_graph.h
                      slot_balancer.h)
set(iser_private_headers moe_bench.h)

if(ISER_WITH_CUDA AND TARGET iser_gpu)
  foreach(layer cuda runtime moe)
    add_library(iser_${layer}_layer INTERFACE)
    target_link_libraries(iser_${layer}_layer INTERFACE iser_gpu)
    set_target_properties(iser_${layer}_layer PROPERTIES EXPORT_NAME ${layer})
    add_library(iser::${layer} ALIAS iser_${layer}_layer)
    list(APPEND iser_export_targets iser_${layer}_layer)
  endforeach()
  list(APPEND iser_export_targets iser_gpu)
else()
  list(APPEND iser_private_headers ${iser_cuda_headers})
endif()
add_library(iser::core ALIAS iser_core)

file(GLOB iser_public_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/iser/*.h)
foreach(header ${iser_private_headers})
  list(REMOVE_ITEM iser_public_headers ${PROJECT_SOURCE_DIR}/include/iser/${header})
endforeach()
install(FILES ${iser_public_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/iser)

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
