# cmake --install: headers under include/tinyformer/, the library, and a package config so that
# an outside project writes find_package(tinyformer CONFIG REQUIRED).
include(CMakePackageConfigHelpers)

install(TARGETS tinyformer EXPORT tinyformerTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(layer core autograd nn)
  install(DIRECTORY ${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tinyformer/${layer}
    FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()
install(FILES nn/tinyformer.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tinyformer)
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
