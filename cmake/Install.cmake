# cmake --install: headers under include/tinyformer/, the library, and a package config so that
# an outside project writes find_package(tinyformer CONFIG REQUIRED) and links
# tinyformer::tinyformer (tested by tests/install/check_install.cmake).
include(CMakePackageConfigHelpers)

# The installed library keeps the directories of the libraries it links in its RUNPATH. This
# matters for OpenBLAS: Debian's alternatives may point libopenblas.so.0 at the pthread build,
# which would start a second thread pool beside OpenMP's; the RUNPATH pins the OpenMP build.
set_target_properties(tinyformer PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
if(BUILD_SHARED_LIBS)
  # libtinyformer_omp_wait_policy lies beside libtinyformer (see CMakeLists.txt).
  set_target_properties(tinyformer PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()

set(tinyformer_export_targets tinyformer)
if(BUILD_SHARED_LIBS)
  set(TINYFORMER_PACKAGE_STATIC OFF)
  list(APPEND tinyformer_export_targets tinyformer_omp_wait_policy)
else()
  if(TINYFORMER_CUDA_ENABLED)
    message(FATAL_ERROR "a static libtinyformer with the CUDA backend is not packaged: build the "
      "shared library (the default) or configure with -DTINYFORMER_CUDA=OFF")
  endif()
  # A static archive leaves oneDNN, OpenBLAS and OpenMP to the program's link step, so the
  # package carries the target that names them and its config finds oneDNN and OpenMP.
  set(TINYFORMER_PACKAGE_STATIC ON)
  set_target_properties(tinyformer_deps_cpu PROPERTIES EXPORT_NAME deps_cpu)
  list(APPEND tinyformer_export_targets tinyformer_deps_cpu)
endif()

install(TARGETS ${tinyformer_export_targets} EXPORT tinyformerTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public headers keep their layer folders and sub-folders: <tinyformer/core/tensor.h>,
# <tinyformer/nn/io/checkpoint.h>, and the umbrella <tinyformer/tinyformer.h>. Only the headers
# the umbrella reaches are installed (cmake/InstallHeaders.cmake); backend headers and core's
# kernel math stay private.
install(CODE "set(TINYFORMER_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(TINYFORMER_INCLUDE_DESTINATION \"${CMAKE_INSTALL_INCLUDEDIR}/tinyformer\")")
install(SCRIPT cmake/InstallHeaders.cmake)
install(EXPORT tinyformerTargets NAMESPACE tinyformer::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tinyformer)
configure_package_config_file(cmake/tinyformerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tinyformerConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tinyformer)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tinyformerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tinyformerConfig.cmake
  ${PROJECT_BINARY_DIR}/tinyformerConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tinyformer)
